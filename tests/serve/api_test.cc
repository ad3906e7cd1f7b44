// The REST API of a real tessera-serve process over real sockets, with the null backend (nothing
// runs) on the HGX fixture: auth and tenancy isolation, bad bodies, idempotency, GPU
// administration and the lease file, OpenAPI, metrics, restart durability.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <set>

#include "serve/null_serve_fixture.h"
#include "support/wait.h"

namespace tessera::testing {
namespace {

using nlohmann::json;

class ServeApi : public NullServeTest {
 protected:
  void SetUp() override {
    NullServeTest::SetUp();
    StartServe();
  }

  json WaitForState(client::Connection& connection, const std::string& id,
                    const std::string& state) {
    json container;
    WaitUntil([&] {
      container = CallJson(connection, "GET", "/v1/containers/" + id);
      return container.is_object() && container.value("state", "") == state;
    });
    return container;
  }

  std::string Token(const std::string& tenancy) {
    const std::string token = TenancyToken(*admin_, tenancy);
    EXPECT_FALSE(token.empty()) << tenancy;
    return token;
  }
};

TEST_F(ServeApi, AdminTokenIsWrittenPrivateAndPrintedOnce) {
  struct stat st {};
  ASSERT_EQ(::stat((serve_->data_dir() + "/admin.token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::string token = serve_->admin_token();
  EXPECT_EQ(token.rfind("tsa_", 0), 0u);
  EXPECT_NE(serve_->out().find(token), std::string::npos);
  serve_->Kill(SIGTERM);
  ASSERT_TRUE(serve_->Start());
  // The existing file is used as is and not printed again.
  EXPECT_EQ(serve_->admin_token(), token);
  std::string out = serve_->out();
  EXPECT_EQ(out.find(token), out.rfind(token));
}

TEST_F(ServeApi, RequestsWithoutAValidTokenAre401) {
  auto anonymous = serve_->Connect("");
  int status = 0;
  CallJson(*anonymous, "GET", "/v1/containers", "", &status);
  EXPECT_EQ(status, 401);
  auto wrong = serve_->Connect("tsa_not-the-token");
  CallJson(*wrong, "GET", "/v1/gpus", "", &status);
  EXPECT_EQ(status, 401);
  // The API description is public; metrics need a token (see token_scopes_test).
  CallJson(*anonymous, "GET", "/v1/openapi.json", "", &status);
  EXPECT_EQ(status, 200);
}

TEST_F(ServeApi, OpenApiDocumentDescribesEveryEndpoint) {
  int status = 0;
  auto doc = CallJson(*admin_, "GET", "/v1/openapi.json", "", &status);
  ASSERT_EQ(status, 200);
  EXPECT_EQ(doc.value("openapi", ""), "3.0.3");
  for (const char* path :
       {"/v1/tenancies", "/v1/tenancies/{name}", "/v1/tenancies/{name}/tokens", "/v1/containers",
        "/v1/containers/{id}", "/v1/containers/{id}/logs", "/v1/gpus", "/v1/gpus/{id}",
        "/v1/leases", "/v1/gpus/{id}/{action}", "/metrics", "/v1/openapi.json"}) {
    EXPECT_TRUE(doc["paths"].contains(path)) << path;
  }
  EXPECT_TRUE(doc["paths"]["/v1/containers/{id}"].contains("delete"));
  EXPECT_TRUE(doc["paths"]["/v1/tenancies/{name}"].contains("put"));
}

TEST_F(ServeApi, EveryBadBodyIs400NamingTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"not json", "body"},
      {"[1,2]", "body"},
      {R"({"tenancy":"a"})", "image"},
      {R"({"image":"busybox"})", "tenancy"},
      {R"({"image":"","tenancy":"a"})", "image"},
      {R"({"image":7,"tenancy":"a"})", "image"},
      {R"({"image":"busybox","tenancy":"Bad_Name"})", "tenancy"},
      {R"({"image":"busybox","tenancy":"a","gpus":9})", "gpus"},
      {R"({"image":"busybox","tenancy":"a","gpus":-1})", "gpus"},
      {R"({"image":"busybox","tenancy":"a","gpus":1.5})", "gpus"},
      {R"({"image":"busybox","tenancy":"a","gpus":"2"})", "gpus"},
      {R"({"image":"busybox","tenancy":"a","isolation":"docker"})", "isolation"},
      {R"({"image":"busybox","tenancy":"a","command":"echo hi"})", "command"},
      {R"({"image":"busybox","tenancy":"a","command":["echo",1]})", "command[1]"},
      {R"({"image":"busybox","tenancy":"a","env":["A=1"]})", "env"},
      {R"({"image":"busybox","tenancy":"a","env":{"A":1}})", "env.A"},
      {R"({"image":"busybox","tenancy":"a","env":{"1A":"x"}})", "env.1A"},
      {R"({"image":"busybox","tenancy":"a","gpu":1})", "gpu"},
  };
  for (const auto& [body, field] : cases) {
    int status = 0;
    auto answer = CallJson(*admin_, "POST", "/v1/containers", body, &status);
    EXPECT_EQ(status, 400) << body;
    std::string message = answer["error"].value("message", "");
    EXPECT_EQ(message.rfind(field + ":", 0), 0u) << body << " -> " << message;
  }
  int status = 0;
  auto answer = CallJson(*admin_, "PUT", "/v1/tenancies/Team_A", "{}", &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(answer["error"].value("message", "").rfind("name:", 0), 0u) << answer;
  answer = CallJson(*admin_, "PUT", "/v1/tenancies/team-a", R"({"labels":{"x":1}})", &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(answer["error"].value("message", "").rfind("labels.x:", 0), 0u) << answer;
  answer = CallJson(*admin_, "POST", "/v1/gpus/0000:18:00.0/drain", R"({"why":"x"})", &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(answer["error"].value("message", "").rfind("why:", 0), 0u) << answer;
}

TEST_F(ServeApi, TenancyTokensSeeOnlyTheirOwnTenancy) {
  std::string alpha = Token("alpha");
  std::string beta = Token("beta");
  ASSERT_FALSE(alpha.empty());
  ASSERT_FALSE(beta.empty());
  auto a = serve_->Connect(alpha);
  auto b = serve_->Connect(beta);
  int status = 0;
  auto submitted = CallJson(*a, "POST", "/v1/containers",
                            R"({"image":"busybox","tenancy":"alpha","command":["true"]})", &status);
  ASSERT_EQ(status, 202) << submitted;
  std::string id = submitted["id"];

  CallJson(*a, "GET", "/v1/containers/" + id, "", &status);
  EXPECT_EQ(status, 200);
  CallJson(*b, "GET", "/v1/containers/" + id, "", &status);
  EXPECT_EQ(status, 404);
  CallJson(*b, "GET", "/v1/containers/" + id + "/logs", "", &status);
  EXPECT_EQ(status, 404);
  CallJson(*b, "DELETE", "/v1/containers/" + id, "", &status);
  EXPECT_EQ(status, 404);
  auto listed = CallJson(*b, "GET", "/v1/containers", "", &status);
  EXPECT_EQ(status, 200);
  EXPECT_TRUE(listed["containers"].empty()) << listed;
  CallJson(*b, "POST", "/v1/containers", R"({"image":"busybox","tenancy":"alpha"})", &status);
  EXPECT_EQ(status, 404);
  CallJson(*b, "GET", "/v1/tenancies/alpha", "", &status);
  EXPECT_EQ(status, 404);
  auto tenancies = CallJson(*b, "GET", "/v1/tenancies", "", &status);
  ASSERT_EQ(tenancies["tenancies"].size(), 1u);
  EXPECT_EQ(tenancies["tenancies"][0]["name"], "beta");
  // Administration needs the admin token.
  CallJson(*b, "POST", "/v1/gpus/0000:18:00.0/drain", "", &status);
  EXPECT_EQ(status, 403);
  CallJson(*b, "POST", "/v1/tenancies/beta/tokens", "", &status);
  EXPECT_EQ(status, 403);
  // The admin sees both; tokens are stored hashed, never in clear.
  listed = CallJson(*admin_, "GET", "/v1/containers", "", &status);
  EXPECT_EQ(listed["containers"].size(), 1u);
  std::string db = ReadText(serve_->data_dir() + "/tessera.db") +
                   ReadText(serve_->data_dir() + "/tessera.db-wal");
  EXPECT_EQ(db.find(alpha), std::string::npos);
  EXPECT_EQ(db.find(alpha.substr(4)), std::string::npos);
}

TEST_F(ServeApi, IdempotencyKeyMakesARetryReturnTheFirstSubmission) {
  const std::string body = R"({"image":"busybox","tenancy":"team-a","command":["true"]})";
  int status = 0;
  auto first =
      CallJson(*admin_, "POST", "/v1/containers", body, &status, {{"Idempotency-Key", "k1"}});
  ASSERT_EQ(status, 202);
  auto again =
      CallJson(*admin_, "POST", "/v1/containers", body, &status, {{"Idempotency-Key", "k1"}});
  EXPECT_EQ(status, 202);
  EXPECT_EQ(again["id"], first["id"]);
  CallJson(*admin_, "POST", "/v1/containers",
           R"({"image":"busybox","tenancy":"team-a","command":["false"]})", &status,
           {{"Idempotency-Key", "k1"}});
  EXPECT_EQ(status, 409);
  auto other =
      CallJson(*admin_, "POST", "/v1/containers", body, &status, {{"Idempotency-Key", "k2"}});
  EXPECT_NE(other["id"], first["id"]);
  auto listed = CallJson(*admin_, "GET", "/v1/containers");
  EXPECT_EQ(listed["containers"].size(), 2u);
  // The unknown tenancy was created by the submission.
  CallJson(*admin_, "GET", "/v1/tenancies/team-a", "", &status);
  EXPECT_EQ(status, 200);
}

TEST_F(ServeApi, ContainerListingIsPagedFilteredAndOrdered) {
  // Seven submissions without GPUs (the null backend runs them at once: they end "exited").
  std::vector<std::string> ids;
  int status = 0;
  for (int i = 0; i < 7; ++i) {
    auto c = CallJson(*admin_, "POST", "/v1/containers",
                      std::string(R"({"image":"busybox","tenancy":")") +
                          (i < 5 ? "team-a" : "team-b") + R"(","command":["true"]})",
                      &status);
    ASSERT_EQ(status, 202) << c;
    ids.push_back(c["id"]);
  }
  // Oldest first, three per page, following `next` until it is absent.
  std::vector<std::string> seen;
  std::string after;
  int pages = 0;
  for (;;) {
    auto page =
        CallJson(*admin_, "GET",
                 "/v1/containers?limit=3" + (after.empty() ? "" : "&after=" + after), "", &status);
    ASSERT_EQ(status, 200) << page;
    pages++;
    EXPECT_LE(page["containers"].size(), 3u);
    for (const auto& c : page["containers"])
      seen.push_back(c["id"]);
    if (!page.contains("next")) break;
    EXPECT_EQ(page["next"], seen.back());
    after = page["next"];
    ASSERT_LT(pages, 10);
  }
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(seen, ids);
  // Newest first.
  auto newest = CallJson(*admin_, "GET", "/v1/containers?order=desc&limit=2");
  ASSERT_EQ(newest["containers"].size(), 2u);
  EXPECT_EQ(newest["containers"][0]["id"], ids[6]);
  EXPECT_EQ(newest["containers"][1]["id"], ids[5]);
  auto older =
      CallJson(*admin_, "GET",
               "/v1/containers?order=desc&limit=2&after=" + newest["next"].get<std::string>());
  ASSERT_EQ(older["containers"].size(), 2u);
  EXPECT_EQ(older["containers"][0]["id"], ids[4]);
  // Filters: a tenancy; states (nothing is pending once the null backend ran them).
  auto team_b = CallJson(*admin_, "GET", "/v1/containers?tenancy=team-b");
  ASSERT_EQ(team_b["containers"].size(), 2u);
  EXPECT_FALSE(team_b.contains("next"));
  ASSERT_TRUE(WaitForState(*admin_, ids[6], "exited").is_object());
  auto pending = CallJson(*admin_, "GET", "/v1/containers?state=pending,running");
  EXPECT_TRUE(pending["containers"].empty()) << pending;
  auto ended = CallJson(*admin_, "GET", "/v1/containers?state=exited,failed&limit=1000");
  EXPECT_EQ(ended["containers"].size(), 7u);
  // Bad queries name the parameter; another tenancy's ID is no cursor for a tenant token.
  for (const auto& [query, field] :
       std::vector<std::pair<std::string, std::string>>{{"limit=0", "limit"},
                                                        {"limit=1001", "limit"},
                                                        {"limit=ten", "limit"},
                                                        {"order=sideways", "order"},
                                                        {"state=sleeping", "state"},
                                                        {"colour=red", "colour"},
                                                        {"limit=1&limit=2", "limit"},
                                                        {"after=c-nosuchid", "after"},
                                                        {"tenancy=Bad_Name", "tenancy"},
                                                        {"after=%zz", "after"}}) {
    auto error = CallJson(*admin_, "GET", "/v1/containers?" + query, "", &status);
    EXPECT_EQ(status, 400) << query;
    EXPECT_NE(error.dump().find(field), std::string::npos) << query << ": " << error;
  }
  auto b = serve_->Connect(Token("team-b"));
  CallJson(*b, "GET", "/v1/containers?after=" + ids[0], "", &status);
  EXPECT_EQ(status, 400);
  auto own = CallJson(*b, "GET", "/v1/containers?after=" + ids[5], "", &status);
  ASSERT_EQ(status, 200);
  ASSERT_EQ(own["containers"].size(), 1u);
  EXPECT_EQ(own["containers"][0]["id"], ids[6]);
}

TEST_F(ServeApi, GpuContainersRunThroughTheLeaseMachineAndSurviveARestart) {
  int status = 0;
  auto submitted = CallJson(*admin_, "POST", "/v1/containers",
                            R"({"image":"busybox","tenancy":"team-a","gpus":2})", &status);
  ASSERT_EQ(status, 202);
  std::string id = submitted["id"];
  auto done = WaitForState(*admin_, id, "exited");
  EXPECT_EQ(done.value("exit_code", -1), 0);
  EXPECT_EQ(done["gpus"].size(), 2u);
  // The two GPUs were checked and are free again.
  json gpus;
  WaitUntil([&] {
    gpus = CallJson(*admin_, "GET", "/v1/gpus");
    int free = 0;
    for (const auto& gpu : gpus["gpus"])
      free += gpu["state"] == "free";
    return free == 8;
  });
  for (const auto& gpu : gpus["gpus"])
    EXPECT_EQ(gpu["state"], "free") << gpu;
  std::string log = serve_->log();
  const std::string pci = done["gpus"][0];
  for (const char* step : {"free -> reserved", "reserved -> active", "active -> releasing",
                           "releasing -> checking", "checking -> free"}) {
    EXPECT_NE(log.find("GPU " + pci + ": " + step), std::string::npos) << step;
  }
  serve_->Kill(SIGTERM);
  ASSERT_TRUE(serve_->Start());
  admin_ = serve_->Connect(serve_->admin_token());  // it listens on a new port
  auto again = CallJson(*admin_, "GET", "/v1/containers/" + id, "", &status);
  EXPECT_EQ(status, 200);
  EXPECT_EQ(again["state"], "exited");
  EXPECT_EQ(again["gpus"], done["gpus"]);
}

TEST_F(ServeApi, AdminDrainQuarantineAndReleaseShowInTheLeaseFile) {
  const std::string pci = "0000:18:00.0";
  int status = 0;
  auto gpu = CallJson(*admin_, "POST", "/v1/gpus/" + pci + "/drain", "", &status);
  ASSERT_EQ(status, 200) << gpu;
  EXPECT_EQ(gpu["state"], "draining");
  auto leases = json::parse(ReadText(serve_->lease_file()));
  EXPECT_EQ(leases["version"], 1);
  EXPECT_EQ(leases["gpus"][pci]["state"], "draining");
  EXPECT_EQ(leases["gpus"].size(), 8u);

  gpu = CallJson(*admin_, "POST", "/v1/gpus/" + pci + "/quarantine", R"({"reason":"fan noise"})",
                 &status);
  EXPECT_EQ(gpu["state"], "quarantined");
  leases = json::parse(ReadText(serve_->lease_file()));
  EXPECT_EQ(leases["gpus"][pci]["state"], "quarantined");
  EXPECT_EQ(leases["gpus"][pci]["reason"], "fan noise");
  CallJson(*admin_, "POST", "/v1/gpus/" + pci + "/undrain", "", &status);
  EXPECT_EQ(status, 409);

  // An 8-GPU request cannot be placed while one GPU is out of service.
  auto big = CallJson(*admin_, "POST", "/v1/containers",
                      R"({"image":"busybox","tenancy":"t","gpus":8})", &status);
  ASSERT_EQ(status, 202);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(CallJson(*admin_, "GET", "/v1/containers/" + std::string(big["id"]))["state"],
            "pending");
  gpu = CallJson(*admin_, "POST", "/v1/gpus/" + pci + "/release", "", &status);
  EXPECT_EQ(status, 200);
  EXPECT_EQ(WaitForState(*admin_, big["id"], "exited")["gpus"].size(), 8u);
  CallJson(*admin_, "POST", "/v1/gpus/0000:99:00.0/drain", "", &status);
  EXPECT_EQ(status, 404);
  CallJson(*admin_, "POST", "/v1/gpus/" + pci + "/explode", "", &status);
  EXPECT_EQ(status, 404);
}

TEST_F(ServeApi, MetricsCountGpusContainersAndLatency) {
  int status = 0;
  CallJson(*admin_, "POST", "/v1/containers", R"({"image":"busybox","tenancy":"t"})", &status);
  ASSERT_EQ(status, 202);
  auto response = admin_->Call("GET", "/metrics");
  ASSERT_TRUE(response.ok());
  EXPECT_EQ(response->status, 200);
  const std::string& text = response->body;
  EXPECT_NE(text.find("tessera_gpus{state=\"free\"} 8"), std::string::npos) << text;
  EXPECT_NE(text.find("tessera_containers{state=\"pending\"}"), std::string::npos);
  EXPECT_NE(
      text.find("tessera_http_request_duration_seconds_bucket{method=\"POST\",le=\"+Inf\"} 1"),
      std::string::npos)
      << text;
}

TEST_F(ServeApi, DashboardIsServedAtTheRoot) {
  auto anonymous = serve_->Connect("");
  auto response = anonymous->Call("GET", "/");
  ASSERT_TRUE(response.ok());
  EXPECT_EQ(response->status, 200);
  EXPECT_NE(response->headers["content-type"].find("text/html"), std::string::npos);
  EXPECT_NE(response->body.find("/v1/dashboard"), std::string::npos);
}

TEST_F(ServeApi, DashboardDocumentIsOneRequestWithTheUsageSeries) {
  int status = 0;
  std::string tenant = Token("dash");
  json body = {{"image", "busybox"}, {"tenancy", "dash"}, {"gpus", 2}};
  auto submitted = CallJson(*admin_, "POST", "/v1/containers", body.dump(), &status);
  ASSERT_EQ(status, 202) << submitted;
  WaitForState(*admin_, submitted["id"], "exited");
  auto doc = CallJson(*admin_, "GET", "/v1/dashboard?usage=dash&range=day", "", &status);
  ASSERT_EQ(status, 200) << doc;
  // This host: one node row holding its 8 GPUs, each with its lease state and no telemetry
  // (no NVML here).
  ASSERT_EQ(doc["gpus"].size(), 8u) << doc;
  ASSERT_EQ(doc["nodes"].size(), 1u);
  EXPECT_EQ(doc["nodes"][0]["name"], "");
  size_t listed = 0;
  for (const auto& group : doc["nodes"][0]["groups"])
    listed += group["gpus"].size();
  EXPECT_EQ(listed, 8u);
  EXPECT_EQ(doc["telemetry_ms"], 0);
  EXPECT_TRUE(doc["gpus"][0]["util_percent"].is_null());
  EXPECT_EQ(doc["counts"]["containers"]["exited"], 1);
  // The chart: the usage API's answer for the last day, 96 buckets of 15 minutes.
  ASSERT_EQ(doc["usage"]["series"].size(), 96u) << doc["usage"];
  EXPECT_EQ(doc["usage"]["step_s"], 900);
  EXPECT_EQ(doc["usage"]["tenancy"], "dash");
  // A tenant sees the GPUs, not another tenancy's usage.
  auto mine = serve_->Connect(tenant);
  CallJson(*mine, "GET", "/v1/dashboard?usage=dash", "", &status);
  EXPECT_EQ(status, 200);
  Token("other");
  CallJson(*mine, "GET", "/v1/dashboard?usage=other", "", &status);
  EXPECT_EQ(status, 404);
  CallJson(*admin_, "GET", "/v1/dashboard?range=week", "", &status);
  EXPECT_EQ(status, 400);
  CallJson(*admin_, "GET", "/v1/dashboard?usage=Not_A_Name", "", &status);
  EXPECT_EQ(status, 400);
  // The usage API's series on its own; too many buckets are refused.
  auto usage =
      CallJson(*admin_, "GET", "/v1/tenancies/dash/usage?from=1700000000&to=1700003600&step=60", "",
               &status);
  ASSERT_EQ(status, 200) << usage;
  EXPECT_EQ(usage["series"].size(), 60u);
  CallJson(*admin_, "GET", "/v1/tenancies/dash/usage?step=60", "", &status);
  EXPECT_EQ(status, 400);
  CallJson(*admin_, "GET", "/v1/tenancies/dash/usage?step=5", "", &status);
  EXPECT_EQ(status, 400);
  // No NVML: /v1/telemetry answers an empty pass.
  auto telemetry = CallJson(*admin_, "GET", "/v1/telemetry", "", &status);
  EXPECT_EQ(status, 200);
  EXPECT_EQ(telemetry["gpus"].size(), 0u) << telemetry;
}

TEST_F(ServeApi, HealthAndReadinessAnswerWithoutAToken) {
  auto anonymous = serve_->Connect("");
  for (const std::string path : {"/healthz", "/readyz"}) {
    auto response = anonymous->Call("GET", path);
    ASSERT_TRUE(response.ok()) << path;
    EXPECT_EQ(response->status, 200) << path;
  }
  auto unknown = anonymous->Call("GET", "/readyzz");
  ASSERT_TRUE(unknown.ok());
  EXPECT_EQ(unknown->status, 404);
}

TEST(ServeLocalBackend, KataWithoutAKataRuntimeIs409WithTheReason) {
  TempDir dir;
  ServeProcess serve(dir.path(), {"--root", MaterializeHost("no-gpu"), "--cdi-dir",
                                  dir.path() + "/cdi", "--backend", "local"});
  std::string log;
  ASSERT_TRUE(serve.Start(&log)) << log;
  auto admin = serve.Connect(serve.admin_token());
  int status = 0;
  auto answer = CallJson(*admin, "POST", "/v1/containers",
                         R"({"image":"busybox","tenancy":"t","isolation":"kata"})", &status);
  EXPECT_EQ(status, 409);
  EXPECT_NE(answer["error"].value("message", "").find("kata"), std::string::npos) << answer;
  // GPUs this host does not have are refused up front too.
  answer = CallJson(*admin, "POST", "/v1/containers",
                    R"({"image":"busybox","tenancy":"t","gpus":1})", &status);
  EXPECT_EQ(status, 409);
  EXPECT_EQ(answer["error"].value("message", "").rfind("gpus:", 0), 0u) << answer;
}

}  // namespace
}  // namespace tessera::testing

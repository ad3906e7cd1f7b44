// A real tessera-serve process attacked the way a hostile tenant or network client would: deep
// nesting echoed into errors, huge values, host files as images, unauthenticated bodies, stalled
// headers, more connections than descriptors, HEAD on keep-alive, odd transfer codings, a weak
// admin token. Null backend (nothing runs) on the HGX fixture.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <fstream>

#include "serve/null_serve_fixture.h"
#include "serve/raw_http.h"

namespace tessera::testing {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

std::string Nested(size_t depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

// VmRSS of a process, in KiB.
long RssKiB(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

// User + system CPU time of a process, in clock ticks.
long CpuTicks(pid_t pid) {
  std::string stat = ReadText("/proc/" + std::to_string(pid) + "/stat");
  auto close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream fields(stat.substr(close + 2));
  std::string field;
  long utime = 0, stime = 0;
  for (int i = 3; fields >> field; ++i) {
    if (i == 14) utime = std::stol(field);
    if (i == 15) {
      stime = std::stol(field);
      break;
    }
  }
  return utime + stime;
}

std::string Request(const std::string& method, const std::string& path, const std::string& token,
                    const std::string& body = "", const std::string& extra = "") {
  std::string text = method + " " + path + " HTTP/1.1\r\nHost: t\r\n";
  if (!token.empty()) text += "Authorization: Bearer " + token + "\r\n";
  text += extra;
  if (!body.empty() || method == "POST" || method == "PUT")
    text += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  return text + "\r\n" + body;
}

class ServeHardening : public NullServeTest {
 protected:
  std::string Token(const std::string& tenancy) {
    const std::string token = TenancyToken(*admin_, tenancy);
    EXPECT_FALSE(token.empty()) << tenancy;
    return token;
  }

  void ExpectHealthy() {
    int status = 0;
    auto fresh = serve_->Connect("");
    auto answer = fresh->Call("GET", "/healthz", "", {});
    ASSERT_TRUE(answer.ok()) << "the service died";
    EXPECT_EQ(answer->status, 200);
    (void)status;
  }
};

TEST_F(ServeHardening, DeepNestingIs400NamingTheFieldAndTheServiceLives) {
  StartServe();
  std::string alpha = Token("alpha");
  auto tenant = serve_->Connect(alpha);
  const std::string deep = Nested(90000);
  struct Case {
    client::Connection* as;
    std::string method, path, body, field;
  };
  const std::vector<Case> cases = {
      {tenant.get(), "POST", "/v1/containers",
       R"({"image":"busybox","tenancy":"alpha","volumes":[{"name":)" + deep +
           R"(,"mountPath":"/data"}]})",
       "volumes[0].name"},
      {tenant.get(), "POST", "/v1/containers",
       R"({"image":"busybox","tenancy":"alpha","volumes":[{"name":"a","mountPath":"/data","readOnly":)" +
           deep + "}]}",
       "volumes[0].readOnly"},
      {admin_.get(), "PUT", "/v1/tenancies/alpha", R"({"extensions":{"x":)" + deep + "}}",
       "extensions.x"},
      {admin_.get(), "PUT", "/v1/tenancies/alpha/storage",
       R"({"nfs":[{"name":"a","server":)" + deep + R"(,"path":"/x"}]})", "nfs[0].server"},
  };
  for (const auto& c : cases) {
    int status = 0;
    auto answer = CallJson(*c.as, c.method, c.path, c.body, &status);
    EXPECT_EQ(status, 400) << c.field;
    std::string message = answer["error"].value("message", "");
    EXPECT_EQ(message.rfind(c.field + "[0]", 0), 0u) << message;
    EXPECT_NE(message.find("nested deeper than 32 levels"), std::string::npos) << message;
    EXPECT_LT(message.size(), 300u);
    ExpectHealthy();
  }
}

TEST_F(ServeHardening, ErrorsQuoteOnlyAShortExcerptOfWhatWasSent) {
  StartServe();
  const std::string huge(200000, 'x');
  const std::vector<std::string> bodies = {
      R"({")" + huge + R"(":1,"image":"busybox","tenancy":"a"})",
      R"({"image":")" + huge + R"(","tenancy":"a"})",
      R"({"image":"busybox","tenancy":")" + huge + R"("})",
      R"({"image":"busybox","tenancy":"a","volumes":[{"name":"a","mountPath":"/)" + huge +
          R"("}]})",
      R"({"image":"busybox","tenancy":"a","volumes":[{"name":[")" + huge +
          R"("],"mountPath":"/d"}]})",
  };
  for (const auto& body : bodies) {
    int status = 0;
    auto answer = CallJson(*admin_, "POST", "/v1/containers", body, &status);
    EXPECT_EQ(status, 400);
    EXPECT_LT(answer.dump().size(), 1024u) << answer.dump().substr(0, 200);
  }
  int status = 0;
  auto answer = CallJson(*admin_, "GET", "/v1/" + std::string(4000, 'y'), "", &status);
  EXPECT_EQ(status, 404);
  EXPECT_LT(answer.dump().size(), 1024u);
}

TEST_F(ServeHardening, ImagesMustBeRegistryReferences) {
  StartServe();
  for (const std::string image :
       {"docker-archive:/etc/shadow", "oci-archive:/root/x.tar", "dir:/etc", "oci:/var/lib/x",
        "oci:latest", "containers-storage:[overlay@/var/lib/containers/storage]busybox",
        "docker-daemon:busybox:latest", "docker://busybox", "/etc/shadow", "../x", "Busybox",
        "busybox:", "busybox@sha256:abc", "-busybox", "a//b", "localhost:abc/x"}) {
    int status = 0;
    auto answer = CallJson(*admin_, "POST", "/v1/containers",
                           json{{"image", image}, {"tenancy", "alpha"}}.dump(), &status);
    EXPECT_EQ(status, 400) << image;
    EXPECT_EQ(answer["error"].value("message", "").rfind("image:", 0), 0u) << answer;
  }
  for (const std::string image :
       {"busybox", "library/busybox:1.36", "localhost/busybox-static:latest",
        "registry.example:5000/team/app-1.2_x:v1.2-rc.1",
        "quay.io/org/"
        "image@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}) {
    int status = 0;
    auto answer = CallJson(*admin_, "POST", "/v1/containers",
                           json{{"image", image}, {"tenancy", "alpha"}}.dump(), &status);
    EXPECT_EQ(status, 202) << image << ": " << answer;
  }
}

TEST_F(ServeHardening, SizeLimitsPerFieldAndPerSubmission) {
  StartServe();
  int status = 0;
  auto answer = CallJson(*admin_, "POST", "/v1/containers",
                         json{{"image", "busybox"},
                              {"tenancy", "alpha"},
                              {"env", {{"BIG", std::string(33 * 1024, 'v')}}}}
                             .dump(),
                         &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(answer["error"].value("message", "").rfind("env.BIG:", 0), 0u) << answer;
  json env = json::object();
  for (int i = 0; i < 10; ++i)
    env["V" + std::to_string(i)] = std::string(30 * 1024, 'v');
  answer = CallJson(*admin_, "POST", "/v1/containers",
                    json{{"image", "busybox"}, {"tenancy", "alpha"}, {"env", env}}.dump(), &status);
  EXPECT_EQ(status, 400);
  EXPECT_NE(answer["error"].value("message", "").find("more than 262144"), std::string::npos)
      << answer;
  env.erase("V9");
  env.erase("V8");
  CallJson(*admin_, "POST", "/v1/containers",
           json{{"image", "busybox"}, {"tenancy", "alpha"}, {"env", env}}.dump(), &status);
  EXPECT_EQ(status, 202);
}

TEST_F(ServeHardening, HeadAnswersCarryNoBodySoKeepAliveStaysInStep) {
  StartServe();
  for (const std::string path : {"/healthz", "/metrics", "/v1/openapi.json", "/"}) {
    RawConnection raw(serve_->port());
    ASSERT_TRUE(raw.connected());
    // HEAD then GET, pipelined on one connection; then close. /metrics needs a token.
    const std::string token = path == "/metrics" ? serve_->admin_token() : "";
    ASSERT_TRUE(raw.Send(Request("HEAD", path, token) +
                         Request("GET", "/healthz", "", "", "Connection: close\r\n")));
    std::string text = raw.Receive(seconds(60));
    ASSERT_EQ(FirstStatus(text), 200) << path << ": " << text.substr(0, 200);
    auto end_of_head = text.find("\r\n\r\n");
    ASSERT_NE(end_of_head, std::string::npos);
    EXPECT_NE(text.substr(0, end_of_head).find("Content-Length: "), std::string::npos);
    // The next bytes are the GET's status line, not the HEAD's body.
    std::string second = text.substr(end_of_head + 4);
    EXPECT_EQ(FirstStatus(second), 200) << path << ": " << second.substr(0, 200);
    EXPECT_NE(second.find("\r\n\r\nok\n"), std::string::npos) << second.substr(0, 200);
  }
}

TEST_F(ServeHardening, PublicRoutesAcceptOnlyGetAndHead) {
  StartServe();
  for (const std::string path : {"/healthz", "/metrics", "/v1/openapi.json", "/"}) {
    for (const std::string method : {"POST", "PUT", "DELETE", "PATCH"}) {
      RawConnection raw(serve_->port());
      ASSERT_TRUE(raw.Send(Request(method, path, "", "{}")));
      std::string text = raw.Receive(seconds(60), "\r\n\r\n");
      EXPECT_EQ(FirstStatus(text), 405) << method << " " << path;
      EXPECT_NE(text.find("Allow: GET, HEAD"), std::string::npos) << text;
    }
  }
}

TEST_F(ServeHardening, TransferCodingsOtherThanChunkedAre501) {
  StartServe();
  RawConnection raw(serve_->port());
  ASSERT_TRUE(raw.Send("POST /v1/containers HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer " +
                       serve_->admin_token() +
                       "\r\nTransfer-Encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"));
  std::string text = raw.Receive(seconds(60), "\r\n\r\n");
  EXPECT_EQ(FirstStatus(text), 501) << text;
}

TEST_F(ServeHardening, MalformedRequestsAre400AndHugeHeaders431) {
  StartServe();
  {
    RawConnection raw(serve_->port());
    ASSERT_TRUE(raw.Send("GET /healthz HTTP/1.1\r\nHost t\r\n\r\n"));
    EXPECT_EQ(FirstStatus(raw.Receive(seconds(60), "\r\n\r\n")), 400);
  }
  {
    RawConnection raw(serve_->port());
    ASSERT_TRUE(raw.Send("G@T / HTTP/1.1\r\n\r\n"));
    EXPECT_EQ(FirstStatus(raw.Receive(seconds(60), "\r\n\r\n")), 400);
  }
  {
    RawConnection raw(serve_->port());
    ASSERT_TRUE(
        raw.Send("GET /healthz HTTP/1.1\r\nX-Big: " + std::string(64 * 1024, 'a') + "\r\n\r\n"));
    EXPECT_EQ(FirstStatus(raw.Receive(seconds(60), "\r\n\r\n")), 431);
  }
  ExpectHealthy();
}

TEST_F(ServeHardening, UnauthenticatedBodiesAreNeverRead) {
  StartServe();
  // The header alone gets the 401: the announced megabyte is never waited for.
  RawConnection one(serve_->port());
  ASSERT_TRUE(
      one.Send("POST /v1/containers HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer nope\r\n"
               "Content-Length: 1048576\r\n\r\n"));
  EXPECT_EQ(FirstStatus(one.Receive(seconds(60), "\r\n\r\n")), 401);

  // 200 connections each announcing 1 MiB and sending most of it: memory stays flat.
  const long before = RssKiB(serve_->pid());
  std::vector<std::unique_ptr<RawConnection>> idle;
  const std::string chunk(64 * 1024, 'x');
  for (int i = 0; i < 200; ++i) {
    auto raw = std::make_unique<RawConnection>(serve_->port());
    ASSERT_TRUE(raw->connected());
    raw->Send("POST /v1/containers HTTP/1.1\r\nHost: t\r\nContent-Length: 1048576\r\n\r\n");
    for (int c = 0; c < 4; ++c)
      if (!raw->Send(chunk)) break;  // the server may already have answered and closed
    idle.push_back(std::move(raw));
  }
  const long after = RssKiB(serve_->pid());
  EXPECT_LT(after - before, 20 * 1024) << "RSS grew from " << before << " to " << after << " KiB";
  // Each is answered on its header: 401, or 429 once the address's rate limit (a burst of 100
  // requests without a valid token) is spent.
  for (auto& raw : idle) {
    const int status = FirstStatus(raw->Receive(seconds(60), "\r\n\r\n"));
    EXPECT_TRUE(status == 401 || status == 429) << status;
  }
  ExpectHealthy();
}

TEST_F(ServeHardening, AStalledHeaderIsCutOffAfterTheHeaderTimeout) {
  StartServe();
  RawConnection raw(serve_->port());
  ASSERT_TRUE(raw.Send("GET /healthz HTTP/1.1\r\nHost: "));
  // The header timeout is 10 s; the connection is closed well before a minute has passed.
  EXPECT_TRUE(raw.WaitClosed(seconds(60)));
}

TEST_F(ServeHardening, AtTheConnectionCapAcceptingPausesUntilOneCloses) {
  StartServe({"--max-connections", "4"});
  std::vector<std::unique_ptr<RawConnection>> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(std::make_unique<RawConnection>(serve_->port()));
    // Each is accepted and served: a keep-alive request proves it.
    ASSERT_TRUE(held.back()->Send(Request("GET", "/healthz", "")));
    ASSERT_EQ(FirstStatus(held.back()->Receive(seconds(60), "ok\n")), 200);
  }
  RawConnection waiting(serve_->port());  // connects into the listen backlog
  ASSERT_TRUE(waiting.Send(Request("GET", "/healthz", "")));
  EXPECT_EQ(waiting.Receive(milliseconds(1500)), "") << "served beyond the cap";
  held.pop_back();
  EXPECT_EQ(FirstStatus(waiting.Receive(seconds(60), "ok\n")), 200);
}

TEST_F(ServeHardening, ALowDescriptorLimitNeitherSpinsNorStopsService) {
  // Started with 128 open files at most: the cap stays below it, so accept never fails with
  // EMFILE, and connections beyond the cap wait in the backlog instead of spinning the acceptor.
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit low = saved;
  low.rlim_cur = 128;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  StartServe();
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
  EXPECT_NE(serve_->log().find("at most 64 connections"), std::string::npos) << serve_->log();
  std::vector<std::unique_ptr<RawConnection>> flood;
  for (int i = 0; i < 300; ++i)
    flood.push_back(std::make_unique<RawConnection>(serve_->port()));
  const long cpu_before = CpuTicks(serve_->pid());
  std::this_thread::sleep_for(seconds(3));
  const long cpu_used = CpuTicks(serve_->pid()) - cpu_before;
  // A spinning acceptor burns ~300 ticks (3 s) here; an idle one almost none.
  EXPECT_LT(cpu_used, 100) << "CPU ticks in 3 s with 300 connections open";
  flood.clear();
  ExpectHealthy();
}

TEST_F(ServeHardening, WeakOrExposedAdminTokensAreRefusedOrWarnedAbout) {
  const std::string path = dir_.path() + "/weak.token";
  std::ofstream(path) << "a\n";
  ::chmod(path.c_str(), 0644);
  {
    ServeProcess weak(dir_.path(), {"--root", root_, "--backend", "null", "--cdi-dir",
                                    dir_.path() + "/cdi", "--admin-token-file", path});
    std::string log;
    EXPECT_FALSE(weak.Start(&log));
    EXPECT_NE(log.find("at least 32"), std::string::npos) << log;
  }
  const std::string strong = std::string(40, 'k');
  std::ofstream(path, std::ios::trunc) << strong << "\n";
  ::chmod(path.c_str(), 0644);
  ServeProcess exposed(dir_.path(), {"--root", root_, "--backend", "null", "--cdi-dir",
                                     dir_.path() + "/cdi", "--admin-token-file", path});
  std::string log;
  ASSERT_TRUE(exposed.Start(&log)) << log;
  EXPECT_NE(exposed.log().find("readable by group or others"), std::string::npos) << exposed.log();
  auto connection = exposed.Connect(strong);
  int status = 0;
  CallJson(*connection, "GET", "/v1/tenancies", "", &status);
  EXPECT_EQ(status, 200);
}

TEST_F(ServeHardening, IdempotencyKeysArePrintableAscii) {
  StartServe();
  RawConnection raw(serve_->port());
  ASSERT_TRUE(raw.Send(Request("POST", "/v1/containers", serve_->admin_token(),
                               R"({"image":"busybox","tenancy":"alpha"})",
                               "Idempotency-Key: caf\xc3\xa9\r\n")));
  EXPECT_EQ(FirstStatus(raw.Receive(seconds(60), "\r\n\r\n")), 400);
}

TEST_F(ServeHardening, NumbersThatDoNotFitAreRefusedNamingTheFieldNeverWrapped) {
  StartServe();
  int status = 0;
  const std::vector<std::string> too_big = {"9223372036854775808", "18446744073709551615",
                                            "-9223372036854775809", "1e19"};
  for (const auto& number : too_big) {
    SCOPED_TRACE(number);
    for (const std::string field : {"gpus", "priority", "maxDurationSeconds"}) {
      auto answer = CallJson(
          *admin_, "POST", "/v1/containers",
          R"({"image":"busybox","tenancy":"alpha",")" + field + "\":" + number + "}", &status);
      EXPECT_EQ(status, 400) << field << answer;
      EXPECT_EQ(answer["error"]["message"].get<std::string>().rfind(field + ":", 0), 0u) << answer;
    }
    auto mig =
        CallJson(*admin_, "POST", "/v1/containers",
                 R"({"image":"busybox","tenancy":"alpha","mig":{"profile":"1g.10gb","count":)" +
                     number + "}}",
                 &status);
    EXPECT_EQ(status, 400) << mig;
    EXPECT_EQ(mig["error"]["message"].get<std::string>().rfind("mig.count:", 0), 0u) << mig;
    for (const auto& [body, field] : std::vector<std::pair<std::string, std::string>>{
             {R"({"maxPriority":)" + number + "}", "maxPriority"},
             {R"({"quota":{"gpus":)" + number + "}}", "quota.gpus"},
             {R"({"quota":{"pending":)" + number + "}}", "quota.pending"}}) {
      auto answer = CallJson(*admin_, "PUT", "/v1/tenancies/alpha", body, &status);
      EXPECT_EQ(status, 400) << body << answer;
      EXPECT_EQ(answer["error"]["message"].get<std::string>().rfind(field + ":", 0), 0u) << answer;
    }
  }
  // Nothing was stored as -1: the tenancy keeps its defaults.
  auto tenancy = CallJson(*admin_, "GET", "/v1/tenancies/alpha", "", &status);
  if (status == 200) EXPECT_EQ(tenancy["maxPriority"], 0) << tenancy;
  // Times: past the year 9999, negative, wrapped, and a `from` after `to` or after now.
  CallJson(*admin_, "PUT", "/v1/tenancies/alpha", "{}", &status);
  for (const auto& [query, field] : std::vector<std::pair<std::string, std::string>>{
           {"from=18446744073709551615", "query parameter from"},
           {"to=9223372036854775808", "query parameter to"},
           {"from=-1", "query parameter from"},
           {"from=200&to=100", "query parameter to"},
           {"from=253402300799", "query parameter from"}}) {
    auto answer = CallJson(*admin_, "GET", "/v1/tenancies/alpha/usage?" + query, "", &status);
    EXPECT_EQ(status, 400) << query << answer;
    EXPECT_EQ(answer["error"]["message"].get<std::string>().rfind(field, 0), 0u) << answer;
  }
}

TEST_F(ServeHardening, DuplicateKeysAreRefusedInEveryBody) {
  StartServe();
  int status = 0;
  CallJson(*admin_, "PUT", "/v1/tenancies/alpha", "{}", &status);
  ASSERT_EQ(status, 200);
  const std::string gpu = CallJson(*admin_, "GET", "/v1/gpus")["gpus"][0]["id"];
  const std::vector<std::tuple<std::string, std::string, std::string>> bodies = {
      {"POST", "/v1/containers", R"({"image":"busybox","tenancy":"alpha","gpus":1,"gpus":8})"},
      {"POST", "/v1/containers",
       R"({"image":"busybox","tenancy":"alpha","env":{"A":"1","A":"2"}})"},
      {"PUT", "/v1/tenancies/alpha", R"({"weight":1,"weight":1000})"},
      {"PUT", "/v1/tenancies/alpha", R"({"quota":{"pending":1,"pending":null}})"},
      {"PUT", "/v1/tenancies/alpha", R"({"labels":{"a":"x","a":"y"}})"},
      {"PUT", "/v1/tenancies/alpha/storage", R"({"nfs":[],"nfs":[]})"},
      {"POST", "/v1/gpus/" + gpu + "/drain", R"({"reason":"a","reason":"b"})"},
      {"POST", "/v1/tenancies/alpha/tokens", R"({"x":1,"x":2})"},
  };
  for (const auto& [method, path, body] : bodies) {
    auto answer = CallJson(*admin_, method, path, body, &status);
    EXPECT_EQ(status, 400) << method << " " << path << " " << body << ": " << answer;
    EXPECT_NE(answer["error"]["message"].get<std::string>().find("duplicate key"),
              std::string::npos)
        << answer;
  }
  // None of them changed anything.
  auto tenancy = CallJson(*admin_, "GET", "/v1/tenancies/alpha");
  EXPECT_EQ(tenancy["weight"], 1.0);
  EXPECT_TRUE(tenancy["labels"].empty());
  EXPECT_EQ(CallJson(*admin_, "GET", "/v1/gpus")["gpus"][0]["state"], "free");
}

TEST_F(ServeHardening, UnknownQueryParametersAreRefusedOnEveryEndpoint) {
  StartServe();
  int status = 0;
  CallJson(*admin_, "PUT", "/v1/tenancies/alpha", "{}", &status);
  auto container =
      CallJson(*admin_, "POST", "/v1/containers", R"({"image":"busybox","tenancy":"alpha"})");
  const std::string id = container["id"];
  const std::string gpu = CallJson(*admin_, "GET", "/v1/gpus")["gpus"][0]["id"];
  const std::vector<std::pair<std::string, std::string>> targets = {
      {"GET", "/v1/queue?tenancy=alpha"},
      {"GET", "/v1/tenancies?x=1"},
      {"GET", "/v1/tenancies/alpha?x=1"},
      {"GET", "/v1/tenancies/alpha/storage?x=1"},
      {"GET", "/v1/tenancies/alpha/usage?since=0"},
      {"POST", "/v1/tenancies/alpha/tokens?x=1"},
      {"GET", "/v1/containers?x=1"},
      {"GET", "/v1/containers/" + id + "?x=1"},
      {"GET", "/v1/containers/" + id + "/logs?follow=1"},
      {"DELETE", "/v1/containers/" + id + "?force=1"},
      {"GET", "/v1/gpus?x=1"},
      {"GET", "/v1/leases?x=1"},
      {"POST", "/v1/gpus/" + gpu + "/drain?x=1"},
      {"GET", "/metrics?x=1"},
      {"GET", "/healthz?x=1"},
      {"GET", "/readyz?x=1"},
      {"GET", "/v1/openapi.json?x=1"},
  };
  for (const auto& [method, target] : targets) {
    auto answer = CallJson(*admin_, method, target, "", &status);
    EXPECT_EQ(status, 400) << method << " " << target << ": " << answer;
    EXPECT_EQ(answer["error"]["message"].get<std::string>().rfind("query parameter", 0), 0u)
        << answer;
  }
  // And nothing happened: the container was not deleted, the GPU not drained.
  EXPECT_FALSE(CallJson(*admin_, "GET", "/v1/containers/" + id)["stop_requested"].get<bool>());
  EXPECT_EQ(CallJson(*admin_, "GET", "/v1/gpus")["gpus"][0]["state"], "free");
}

}  // namespace
}  // namespace tessera::testing

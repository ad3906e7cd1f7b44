// Tokens through a real tessera-serve process over real sockets (null backend, the HGX fixture):
// every endpoint of the OpenAPI document called with every kind of token (admin, tenant,
// read-only, metrics, expired, revoked, none) against the status it must answer, and the
// document's x-tessera-scopes agreeing; expiry and revocation in force at the next request;
// the admin token rotated without a restart; listing without secrets; request rate limits per
// token (429 with Retry-After, then let through again), per tenancy and per source address.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <array>
#include <map>
#include <set>

#include "fleet/fleet.h"
#include "serve/null_serve_fixture.h"
#include "support/wait.h"

namespace tessera::testing {
namespace {

using nlohmann::json;

// The kinds of caller, in the order of Expected's columns.
enum Who { kAdmin, kTenant, kReadOnly, kMetrics, kExpired, kRevoked, kNone, kWhoCount };
constexpr std::array<const char*, kWhoCount> kWhoNames = {
    "admin", "tenant", "read-only", "metrics", "expired", "revoked", "none"};
constexpr int kSkip = -1;  // not called with this token (rotating the admin token: see below)

struct Call {
  std::string method;
  std::string path_template;  // as the OpenAPI document names it; "" for routes it does not list
  std::string path;
  std::string body;
  std::array<int, kWhoCount> expected;
};

class TokenScopes : public NullServeTest {
 protected:
  // A new token of `tenancy` (created when missing; "" with scope metrics: POST /v1/tokens).
  json MakeToken(const std::string& tenancy, const std::string& body) {
    int status = 0;
    if (!tenancy.empty()) {
      CallJson(*admin_, "PUT", "/v1/tenancies/" + tenancy, "{}", &status);
      EXPECT_EQ(status, 200);
    }
    const std::string path =
        tenancy.empty() ? "/v1/tokens" : "/v1/tenancies/" + tenancy + "/tokens";
    auto created = CallJson(*admin_, "POST", path, body, &status);
    EXPECT_EQ(status, 201) << created;
    return created;
  }

  int StatusOf(const std::string& token, const std::string& method, const std::string& path,
               const std::string& body = "") {
    int status = 0;
    CallJson(*serve_->Connect(token), method, path, body, &status);
    return status;
  }
};

TEST_F(TokenScopes, EveryEndpointAnswersEveryKindOfTokenAsItsScopeSays) {
  // Rate limits are another test's subject: off, so ~200 calls from one address stay in scope.
  StartServe({"--rate-limit", "off"});
  std::array<std::string, kWhoCount> tokens;
  tokens[kAdmin] = serve_->admin_token();
  tokens[kTenant] = MakeToken("alpha", "")["token"];
  tokens[kReadOnly] = MakeToken("alpha", R"({"scope":"read-only"})")["token"];
  tokens[kMetrics] = MakeToken("", "")["token"];
  const json expiring = MakeToken("alpha", R"({"scope":"tenant","expiresInSeconds":1})");
  tokens[kExpired] = expiring["token"];
  const json revoked = MakeToken("alpha", "");
  tokens[kRevoked] = revoked["token"];
  int status = 0;
  CallJson(*admin_, "DELETE", "/v1/tokens/" + revoked["id"].get<std::string>(), "", &status);
  ASSERT_EQ(status, 200);
  ASSERT_TRUE(WaitUntil([&] { return StatusOf(tokens[kExpired], "GET", "/v1/gpus") == 401; }));
  // A container of alpha that has ended (the null backend ends it at once).
  auto submitted = CallJson(*admin_, "POST", "/v1/containers",
                            R"({"image":"busybox","tenancy":"alpha"})", &status);
  ASSERT_EQ(status, 202) << submitted;
  const std::string id = submitted["id"];
  ASSERT_TRUE(WaitUntil([&] {
    return CallJson(*admin_, "GET", "/v1/containers/" + id).value("state", "") == "exited";
  }));

  constexpr int A = 200;
  const std::string container = R"({"image":"busybox","tenancy":"alpha"})";
  const std::array<int, kWhoCount> reader = {A, A, A, 403, 401, 401, 401};
  const std::array<int, kWhoCount> writer = {A, A, 403, 403, 401, 401, 401};
  const std::array<int, kWhoCount> open = {A, A, A, A, A, A, A};
  const std::vector<Call> calls = {
      {"GET", "/v1/openapi.json", "/v1/openapi.json", "", open},
      {"GET", "/", "/", "", open},
      {"GET", "", "/healthz", "", open},
      {"GET", "", "/readyz", "", open},
      {"GET", "/metrics", "/metrics", "", {A, 403, 403, A, 401, 401, 401}},
      {"GET", "/v1/tenancies", "/v1/tenancies", "", reader},
      {"GET", "/v1/tenancies/{name}", "/v1/tenancies/alpha", "", reader},
      {"PUT",
       "/v1/tenancies/{name}",
       "/v1/tenancies/alpha",
       "{}",
       {A, 403, 403, 403, 401, 401, 401}},
      {"DELETE",
       "/v1/tenancies/{name}",
       "/v1/tenancies/nobody",
       "",
       {404, 403, 403, 403, 401, 401, 401}},
      {"GET", "/v1/tenancies/{name}/storage", "/v1/tenancies/alpha/storage", "", reader},
      {"PUT",
       "/v1/tenancies/{name}/storage",
       "/v1/tenancies/alpha/storage",
       R"({"nfs":[]})",
       {A, 403, 403, 403, 401, 401, 401}},
      {"GET", "/v1/tenancies/{name}/usage", "/v1/tenancies/alpha/usage", "", reader},
      {"POST",
       "/v1/tenancies/{name}/tokens",
       "/v1/tenancies/alpha/tokens",
       "",
       {201, 403, 403, 403, 401, 401, 401}},
      {"GET", "/v1/tokens", "/v1/tokens", "", {A, 403, 403, 403, 401, 401, 401}},
      {"POST", "/v1/tokens", "/v1/tokens", "", {201, 403, 403, 403, 401, 401, 401}},
      {"DELETE",
       "/v1/tokens/{id}",
       "/v1/tokens/t-ffffffff",
       "",
       {404, 403, 403, 403, 401, 401, 401}},
      // The admin's own call would replace the token the rest of the table uses: see
      // TheAdminTokenRotatesWithoutARestart.
      {"POST",
       "/v1/admin-token:rotate",
       "/v1/admin-token:rotate",
       "",
       {kSkip, 403, 403, 403, 401, 401, 401}},
      {"GET", "/v1/containers", "/v1/containers", "", reader},
      {"POST", "/v1/containers", "/v1/containers", container, {202, 202, 403, 403, 401, 401, 401}},
      {"GET", "/v1/containers/{id}", "/v1/containers/" + id, "", reader},
      {"DELETE", "/v1/containers/{id}", "/v1/containers/" + id, "", writer},
      {"GET", "/v1/containers/{id}/logs", "/v1/containers/" + id + "/logs", "", reader},
      {"GET", "/v1/telemetry", "/v1/telemetry", "", reader},
      {"GET", "/v1/dashboard", "/v1/dashboard", "", reader},
      {"GET", "/v1/queue", "/v1/queue", "", reader},
      {"GET", "/v1/gpus", "/v1/gpus", "", reader},
      {"GET", "/v1/gpus/{id}", "/v1/gpus/0000:ff:00.0", "", {404, 404, 404, 403, 401, 401, 401}},
      {"GET", "/v1/leases", "/v1/leases", "", reader},
      {"POST",
       "/v1/gpus/{id}/{action}",
       "/v1/gpus/0000:ff:00.0/drain",
       "",
       {404, 403, 403, 403, 401, 401, 401}},
      {"GET", "/v1/audit", "/v1/audit", "", {A, 403, 403, 403, 401, 401, 401}},
  };

  // Every operation of the document is in the table, and its x-tessera-scopes name exactly the
  // callers the table lets through.
  auto doc = CallJson(*admin_, "GET", "/v1/openapi.json", "", &status);
  ASSERT_EQ(status, 200);
  std::set<std::pair<std::string, std::string>> covered;
  for (const auto& call : calls) {
    std::string method = call.method;
    for (auto& c : method)
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (call.path_template.empty()) continue;
    covered.insert({call.path_template, method});
    const json& operation = doc["paths"][call.path_template][method];
    ASSERT_TRUE(operation.is_object()) << method << " " << call.path_template;
    std::set<std::string> scopes = operation.value("x-tessera-scopes", std::set<std::string>{});
    for (int who : {kAdmin, kTenant, kReadOnly, kMetrics}) {
      if (call.expected[who] == kSkip) continue;
      const bool allowed = call.expected[who] != 401 && call.expected[who] != 403;
      EXPECT_EQ(allowed, scopes.count(kWhoNames[who]) > 0 || scopes.count("public") > 0)
          << call.method << " " << call.path_template << " as " << kWhoNames[who];
    }
  }
  for (const auto& [path, item] : doc["paths"].items())
    for (const auto& [method, operation] : item.items())
      if (method != "parameters")
        EXPECT_TRUE(covered.count({path, method})) << "not in the table: " << method << " " << path;

  for (const auto& call : calls) {
    for (int who = 0; who < kWhoCount; ++who) {
      if (call.expected[who] == kSkip) continue;
      json answer;
      auto connection = serve_->Connect(tokens[who]);
      answer = CallJson(*connection, call.method, call.path, call.body, &status);
      EXPECT_EQ(status, call.expected[who])
          << call.method << " " << call.path << " as " << kWhoNames[who] << ": "
          << answer.dump().substr(0, 300);
    }
  }
}

TEST_F(TokenScopes, ExpiryAndRevocationTakeEffectAtTheNextRequest) {
  StartServe({});
  const json expiring = MakeToken("alpha", R"({"scope":"read-only","expiresInSeconds":2})");
  const json revoked = MakeToken("alpha", "");
  ASSERT_GT(expiring.value("expires_ms", int64_t{0}), expiring.value("created_ms", int64_t{0}));
  EXPECT_EQ(expiring["scope"], "read-only");
  // One kept-alive connection each: revocation holds on a connection that was let in before.
  auto reader = serve_->Connect(expiring["token"]);
  auto tenant = serve_->Connect(revoked["token"]);
  int status = 0;
  CallJson(*reader, "GET", "/v1/containers", "", &status);
  EXPECT_EQ(status, 200);
  CallJson(*tenant, "GET", "/v1/containers", "", &status);
  EXPECT_EQ(status, 200);
  auto answer =
      CallJson(*admin_, "DELETE", "/v1/tokens/" + revoked["id"].get<std::string>(), "", &status);
  ASSERT_EQ(status, 200) << answer;
  EXPECT_EQ(answer["revoked"], true);
  answer = CallJson(*tenant, "GET", "/v1/containers", "", &status);
  EXPECT_EQ(status, 401) << answer;
  CallJson(*admin_, "DELETE", "/v1/tokens/" + revoked["id"].get<std::string>(), "", &status);
  EXPECT_EQ(status, 404);
  // Expiry: refused from its moment on, with no request in between needed to notice it.
  EXPECT_TRUE(WaitUntil(
      [&] {
        CallJson(*reader, "GET", "/v1/containers", "", &status);
        return status == 401;
      },
      kEventTimeout, std::chrono::milliseconds(100)))
      << status;
  auto listed = CallJson(*admin_, "GET", "/v1/tokens?tenancy=alpha", "", &status);
  ASSERT_EQ(status, 200);
  ASSERT_EQ(listed["tokens"].size(), 1u) << listed;
  EXPECT_EQ(listed["tokens"][0]["id"], expiring["id"]);
  EXPECT_EQ(listed["tokens"][0]["expired"], true);
}

TEST_F(TokenScopes, ListingShowsScopeAndLastUseButNeverASecretOrItsHash) {
  StartServe({});
  const json tenant = MakeToken("alpha", "");
  const json metrics = MakeToken("", R"({"expiresInSeconds":3600})");
  const json other = MakeToken("beta", R"({"scope":"read-only"})");
  int status = 0;
  auto listed = CallJson(*admin_, "GET", "/v1/tokens", "", &status);
  ASSERT_EQ(status, 200);
  ASSERT_EQ(listed["tokens"].size(), 3u) << listed;
  EXPECT_TRUE(listed["tokens"][0]["last_used_ms"].is_null());
  // Used once: its last use shows at once (from memory, not from a store write per request).
  EXPECT_EQ(StatusOf(tenant["token"], "GET", "/v1/gpus"), 200);
  EXPECT_EQ(StatusOf(metrics["token"], "GET", "/metrics"), 200);
  listed = CallJson(*admin_, "GET", "/v1/tokens", "", &status);
  const std::string text = listed.dump();
  for (const json* token : {&tenant, &metrics, &other}) {
    const std::string secret = (*token)["token"];
    EXPECT_EQ(text.find(secret.substr(4)), std::string::npos);
    EXPECT_EQ(text.find(fleet::Sha256Hex(secret)), std::string::npos);
  }
  std::map<std::string, json> by_id;
  for (const auto& token : listed["tokens"])
    by_id[token["id"]] = token;
  EXPECT_EQ(by_id[tenant["id"]]["scope"], "tenant");
  EXPECT_EQ(by_id[tenant["id"]]["tenancy"], "alpha");
  EXPECT_TRUE(by_id[tenant["id"]]["last_used_ms"].is_number_integer());
  EXPECT_TRUE(by_id[tenant["id"]]["expires_ms"].is_null());
  EXPECT_EQ(by_id[metrics["id"]]["scope"], "metrics");
  EXPECT_TRUE(by_id[metrics["id"]]["tenancy"].is_null());
  EXPECT_TRUE(by_id[metrics["id"]]["expires_ms"].is_number_integer());
  EXPECT_TRUE(by_id[other["id"]]["last_used_ms"].is_null());
  listed = CallJson(*admin_, "GET", "/v1/tokens?tenancy=beta", "", &status);
  ASSERT_EQ(listed["tokens"].size(), 1u);
  EXPECT_EQ(listed["tokens"][0]["id"], other["id"]);
  // Bad bodies name the field; scopes go where they belong.
  for (const auto& [path, body, field] : std::vector<std::array<std::string, 3>>{
           {"/v1/tenancies/alpha/tokens", R"({"scope":"root"})", "scope"},
           {"/v1/tenancies/alpha/tokens", R"({"scope":"metrics"})", "scope"},
           {"/v1/tenancies/alpha/tokens", R"({"scope":"admin"})", "scope"},
           {"/v1/tokens", R"({"scope":"tenant"})", "scope"},
           {"/v1/tenancies/alpha/tokens", R"({"expiresInSeconds":0})", "expiresInSeconds"},
           {"/v1/tenancies/alpha/tokens", R"({"expiresInSeconds":1e99})", "expiresInSeconds"},
           {"/v1/tenancies/alpha/tokens", R"({"expires":5})", "expires"}}) {
    auto answer = CallJson(*admin_, "POST", path, body, &status);
    EXPECT_EQ(status, 400) << path << " " << body;
    EXPECT_EQ(answer["error"].value("message", "").rfind(field + ":", 0), 0u) << answer;
  }
}

TEST_F(TokenScopes, TheAdminTokenRotatesWithoutARestart) {
  StartServe({});
  const std::string old_token = serve_->admin_token();
  int status = 0;
  auto rotated = CallJson(*admin_, "POST", "/v1/admin-token:rotate", "", &status);
  ASSERT_EQ(status, 200) << rotated;
  const std::string new_token = rotated["token"];
  EXPECT_NE(new_token, old_token);
  EXPECT_EQ(new_token.rfind("tsa_", 0), 0u);
  // The file holds the new token (so a restart keeps it), private; the old one is refused at
  // once, on the connection it was used on too.
  EXPECT_EQ(serve_->admin_token(), new_token);
  struct stat st {};
  ASSERT_EQ(::stat((serve_->data_dir() + "/admin.token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  CallJson(*admin_, "GET", "/v1/tenancies", "", &status);
  EXPECT_EQ(status, 401);
  EXPECT_EQ(StatusOf(new_token, "GET", "/v1/tenancies"), 200);
  serve_->Kill(SIGTERM);
  std::string log;
  ASSERT_TRUE(serve_->Start(&log)) << log;
  EXPECT_EQ(StatusOf(new_token, "GET", "/v1/tenancies"), 200);
  EXPECT_EQ(StatusOf(old_token, "GET", "/v1/tenancies"), 401);
}

TEST_F(TokenScopes, TooManyRequestsAre429WithRetryAfterUntilTheBucketRefills) {
  StartServe({"--rate-limit", "2/s", "--rate-burst", "3"});
  const std::string token = MakeToken("alpha", "")["token"];
  auto connection = serve_->Connect(token);
  // The burst goes through, then the bucket is empty: a request that comes before it refills
  // is 429 with a whole number of seconds to wait.
  std::optional<client::Response> refused;
  for (int i = 0; i < 200 && !refused; ++i) {
    auto response = connection->Call("GET", "/v1/gpus", "", {});
    ASSERT_TRUE(response.ok());
    if (response->status == 429)
      refused = *response;
    else
      ASSERT_EQ(response->status, 200) << response->body;
  }
  ASSERT_TRUE(refused) << "never limited";
  const std::string retry_after = refused->headers["retry-after"];
  ASSERT_FALSE(retry_after.empty());
  EXPECT_GE(std::stoi(retry_after), 1);
  EXPECT_NE(refused->body.find("rate limit"), std::string::npos) << refused->body;
  // The admin token is not limited.
  for (int i = 0; i < 20; ++i)
    EXPECT_EQ(StatusOf(serve_->admin_token(), "GET", "/v1/gpus"), 200);
  // Let through again once the bucket refilled.
  EXPECT_TRUE(WaitUntil([&] {
    auto response = connection->Call("GET", "/v1/gpus", "", {});
    return response.ok() && response->status == 200;
  }));
  // Requests with no valid token are limited per source address, before any other work.
  auto stranger = serve_->Connect("tsr_not-a-token");
  int status = 0;
  for (int i = 0; i < 200 && status != 429; ++i)
    CallJson(*stranger, "GET", "/v1/containers", "", &status);
  EXPECT_EQ(status, 429);
}

TEST_F(TokenScopes, ATenancysOwnRateLimitReplacesTheDefault) {
  StartServe({"--rate-limit", "1000/s", "--rate-burst", "1000"});
  const std::string slow = MakeToken("slow", "")["token"];
  const std::string fast = MakeToken("fast", "")["token"];
  int status = 0;
  // One request per 1000 s after a burst of 2: the third is refused however slow the machine.
  auto tenancy = CallJson(*admin_, "PUT", "/v1/tenancies/slow",
                          R"({"rateLimit":{"perSecond":0.001,"burst":2}})", &status);
  ASSERT_EQ(status, 200) << tenancy;
  EXPECT_EQ(tenancy["rateLimit"]["burst"], 2);
  auto connection = serve_->Connect(slow);
  for (int expected : {200, 200, 429}) {
    auto response = connection->Call("GET", "/v1/gpus", "", {});
    ASSERT_TRUE(response.ok());
    EXPECT_EQ(response->status, expected);
    if (expected == 429) EXPECT_GE(std::stoi(response->headers["retry-after"]), 1);
  }
  for (int i = 0; i < 10; ++i)
    EXPECT_EQ(StatusOf(fast, "GET", "/v1/gpus"), 200);
  // A PUT without rateLimit keeps it; null gives the tenancy the default again.
  tenancy = CallJson(*admin_, "PUT", "/v1/tenancies/slow", R"({"weight":2})", &status);
  EXPECT_EQ(tenancy["rateLimit"]["burst"], 2) << tenancy;
  tenancy = CallJson(*admin_, "PUT", "/v1/tenancies/slow", R"({"rateLimit":null})", &status);
  ASSERT_EQ(status, 200);
  EXPECT_TRUE(tenancy["rateLimit"].is_null()) << tenancy;
  EXPECT_TRUE(WaitUntil([&] { return StatusOf(slow, "GET", "/v1/gpus") == 200; }));
  // Bad limits name their field.
  for (const auto& [body, field] : std::vector<std::pair<std::string, std::string>>{
           {R"({"rateLimit":{"burst":5}})", "rateLimit.perSecond"},
           {R"({"rateLimit":{"perSecond":-1}})", "rateLimit.perSecond"},
           {R"({"rateLimit":{"perSecond":5,"burst":0}})", "rateLimit.burst"},
           {R"({"rateLimit":{"perSecond":5,"per":1}})", "rateLimit.per"},
           {R"({"rateLimit":7})", "rateLimit"},
           {R"({"extensions":{"rateLimit":{"perSecond":1}}})", "extensions.rateLimit"}}) {
    auto answer = CallJson(*admin_, "PUT", "/v1/tenancies/slow", body, &status);
    EXPECT_EQ(status, 400) << body;
    EXPECT_EQ(answer["error"].value("message", "").rfind(field + ":", 0), 0u) << answer;
  }
}

TEST_F(TokenScopes, MetricsWithoutATokenAreTheAggregateOnlyWhereTheOperatorOpensThem) {
  StartServe({"--metrics-aggregate-public"});
  int status = 0;
  CallJson(*admin_, "POST", "/v1/containers", R"({"image":"busybox","tenancy":"alpha"})", &status);
  ASSERT_EQ(status, 202);
  auto anonymous = serve_->Connect("")->Call("GET", "/metrics");
  ASSERT_TRUE(anonymous.ok());
  EXPECT_EQ(anonymous->status, 200);
  EXPECT_NE(anonymous->body.find("tessera_gpus{state=\"free\"}"), std::string::npos);
  EXPECT_EQ(anonymous->body.find("tenancy="), std::string::npos) << anonymous->body;
  EXPECT_EQ(anonymous->body.find("alpha"), std::string::npos);
  auto full = admin_->Call("GET", "/metrics");
  ASSERT_TRUE(full.ok());
  EXPECT_NE(full->body.find("tenancy=\"alpha\""), std::string::npos) << full->body;
  // A token that is not good for /metrics is refused, not served the aggregate.
  EXPECT_EQ(StatusOf("tsr_wrong", "GET", "/metrics"), 401);
  EXPECT_EQ(StatusOf(MakeToken("alpha", "")["token"], "GET", "/metrics"), 403);
}

}  // namespace
}  // namespace tessera::testing

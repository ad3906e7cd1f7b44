// The audit trail of a real tessera-serve process over real sockets (null backend, HGX fixture):
// one record per mutating request (its change's, or its refusal's), what a record names and
// never names, GET /v1/audit's pages and filters and who may read it, a kill -9 amid changes
// that never leaves a change without its record or a record without its change, and retention.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <atomic>
#include <map>
#include <set>
#include <thread>

#include "fleet/fleet.h"
#include "serve/serve_process.h"
#include "support/wait.h"

namespace tessera::testing {
namespace {

using nlohmann::json;

// DELETE of a container answers 200 once it ended, 202 while it stops.
constexpr int kAny2xx = -1;

class ServeAudit : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = MaterializeHost("hgx-h100-dgx");
    gpus_ = WriteGpuRoms(root_);
    ASSERT_FALSE(gpus_.empty());
    StartServe({});
  }

  void StartServe(std::vector<std::string> extra) {
    serve_ =
        std::make_unique<ServeProcess>(dir_.path(), NullBackendFlags(root_, dir_.path(), extra));
    std::string log;
    ASSERT_TRUE(serve_->Start(&log)) << log;
    admin_ = serve_->Connect(serve_->admin_token());
  }

  // Every record GET /v1/audit returns for `query`, following `next` page by page.
  std::vector<json> AllRecords(const std::string& query = "", size_t* pages = nullptr) {
    std::vector<json> records;
    std::string after;
    for (int page = 0; page < 10000; ++page) {
      int status = 0;
      std::string path = "/v1/audit?limit=1000" + (query.empty() ? "" : "&" + query) + after;
      auto doc = CallJson(*admin_, "GET", path, "", &status);
      EXPECT_EQ(status, 200) << path << ": " << doc.dump();
      if (status != 200) break;
      for (auto& record : doc["records"])
        records.push_back(record);
      if (pages) *pages = page + 1;
      if (!doc.contains("next")) break;
      after = "&after=" + std::to_string(doc["next"].get<int64_t>());
    }
    return records;
  }

  std::string root_;
  std::vector<std::string> gpus_;
  TempDir dir_;
  std::unique_ptr<ServeProcess> serve_;
  std::unique_ptr<client::Connection> admin_;
};

// A table over every mutating route the router has (tenancies, storage, tokens, containers,
// GPU actions), each both carried out and refused: each request leaves exactly one record, under
// its own X-Request-Id, naming the calling token and never its secret.
TEST_F(ServeAudit, EveryMutatingRequestLeavesExactlyOneRecord) {
  const std::string tenant_token = TenancyToken(*admin_, "alpha");
  ASSERT_FALSE(tenant_token.empty());
  auto tenant = serve_->Connect(tenant_token);
  // The tenant token's ID, from the record of its creation.
  std::string tenant_token_id;
  for (const auto& record : AllRecords("action=token.create"))
    tenant_token_id = record["object"].value("id", "");
  ASSERT_EQ(tenant_token_id.rfind("t-", 0), 0u);
  int status = 0;
  auto pending = CallJson(*tenant, "POST", "/v1/containers",
                          R"({"image":"busybox","tenancy":"alpha","gpus":1})", &status);
  ASSERT_EQ(status, 202) << pending.dump();
  const std::string container = pending.value("id", "");
  CallJson(*admin_, "PUT", "/v1/tenancies/gamma", "{}", &status);
  ASSERT_EQ(status, 200);
  const std::string gpu = gpus_.back();

  struct Case {
    client::Connection* as;
    std::string method, path, body;
    int status;
    std::string action, result, object_id;
  };
  const std::vector<Case> cases = {
      {admin_.get(), "PUT", "/v1/tenancies/beta", R"({"weight":3})", 200, "tenancy.put", "ok",
       "beta"},
      {admin_.get(), "PUT", "/v1/tenancies/beta", R"({"weight":"heavy"})", 400, "tenancy.put",
       "invalid_argument", "beta"},
      {tenant.get(), "PUT", "/v1/tenancies/alpha", "{}", 403, "tenancy.put", "permission_denied",
       "alpha"},
      {admin_.get(), "PUT", "/v1/tenancies/beta/storage", R"({"nfs":[]})", 200, "storage.put", "ok",
       "beta"},
      {tenant.get(), "PUT", "/v1/tenancies/alpha/storage", R"({"nfs":[]})", 403, "storage.put",
       "permission_denied", "alpha"},
      {admin_.get(), "POST", "/v1/tenancies/beta/tokens", "", 201, "token.create", "ok", "*"},
      {tenant.get(), "POST", "/v1/tenancies/alpha/tokens", "", 403, "token.create",
       "permission_denied", ""},
      {tenant.get(), "POST", "/v1/containers", R"({"image":"busybox","tenancy":"alpha"})", 202,
       "container.create", "ok", "*"},
      {tenant.get(), "POST", "/v1/containers", R"({"image":"busybox"})", 400, "container.create",
       "invalid_argument", ""},
      {tenant.get(), "DELETE", "/v1/containers/" + container, "", kAny2xx, "container.delete", "ok",
       container},
      {tenant.get(), "DELETE", "/v1/containers/c-00000000deadbeef", "", 404, "container.delete",
       "not_found", "c-00000000deadbeef"},
      {admin_.get(), "POST", "/v1/gpus/" + gpu + "/drain", "", 200, "gpu.drain", "ok", gpu},
      {admin_.get(), "POST", "/v1/gpus/" + gpu + "/undrain", "", 200, "gpu.undrain", "ok", gpu},
      {admin_.get(), "POST", "/v1/gpus/" + gpu + "/quarantine", R"({"reason":"fan"})", 200,
       "gpu.quarantine", "ok", gpu},
      {admin_.get(), "POST", "/v1/gpus/" + gpu + "/release", "", 200, "gpu.release", "ok", gpu},
      {tenant.get(), "POST", "/v1/gpus/" + gpu + "/drain", "", 403, "gpu.drain",
       "permission_denied", gpu},
      {admin_.get(), "POST", "/v1/gpus/" + gpu + "/explode", "", 404, "gpu.action", "not_found",
       gpu},
      {admin_.get(), "DELETE", "/v1/tenancies/gamma", "", 200, "tenancy.delete", "ok", "gamma"},
      {admin_.get(), "DELETE", "/v1/tenancies/nowhere", "", 404, "tenancy.delete", "not_found",
       "nowhere"},
      {admin_.get(), "POST", "/v1/tokens", "", 201, "token.create", "ok", "*"},
      {tenant.get(), "POST", "/v1/tokens", "", 403, "token.create", "permission_denied", ""},
      {tenant.get(), "POST", "/v1/admin-token:rotate", "", 403, "admin-token.rotate",
       "permission_denied", "admin"},
      {admin_.get(), "DELETE", "/v1/tokens/t-ffffffff", "", 404, "token.revoke", "not_found",
       "t-ffffffff"},
      // Last: the tenant's own token revoked (the cases above use it).
      {admin_.get(), "DELETE", "/v1/tokens/" + tenant_token_id, "", 200, "token.revoke", "ok",
       tenant_token_id},
  };
  std::vector<std::string> request_ids;
  std::vector<std::string> secrets = {serve_->admin_token(), tenant_token};
  for (const auto& c : cases) {
    auto response = c.as->Call(c.method, c.path, c.body, {{"X-Request-Id", "caller-chosen-id"}});
    ASSERT_TRUE(response) << c.method << " " << c.path;
    if (c.status == kAny2xx) {
      EXPECT_EQ(response->status / 100, 2) << c.path << ": " << response->body;
    } else {
      EXPECT_EQ(response->status, c.status) << c.method << " " << c.path << ": " << response->body;
    }
    const std::string id = response->headers["x-request-id"];
    EXPECT_FALSE(id.empty()) << c.path;
    EXPECT_EQ(id.find("caller-chosen"), std::string::npos) << "a caller's request ID is echoed";
    request_ids.push_back(id);
    auto doc = json::parse(response->body, nullptr, false);
    if (doc.is_object() && doc.contains("token")) secrets.push_back(doc["token"]);
  }
  std::map<std::string, std::vector<json>> by_request;
  const auto records = AllRecords();
  for (const auto& record : records)
    by_request[record.value("request_id", "")].push_back(record);
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    SCOPED_TRACE(c.method + " " + c.path + " " + c.body);
    const auto& found = by_request[request_ids[i]];
    ASSERT_EQ(found.size(), 1u);
    const json& record = found[0];
    EXPECT_EQ(record.value("action", ""), c.action);
    EXPECT_EQ(record.value("result", ""), c.result);
    if (c.object_id == "*") {
      EXPECT_FALSE(record["object"].value("id", "").empty());
    } else {
      EXPECT_EQ(record["object"].value("id", ""), c.object_id);
    }
    const bool as_admin = c.as == admin_.get();
    EXPECT_EQ(record.value("token_id", ""), as_admin ? "admin" : tenant_token_id);
    EXPECT_EQ(record.value("scope", ""), as_admin ? "admin" : "tenant");
    EXPECT_GT(record.value("time_ms", int64_t{0}), 0);
  }
  // Neither a secret nor its hash appears anywhere in the trail.
  const std::string all = json(records).dump();
  for (const auto& secret : secrets) {
    ASSERT_FALSE(secret.empty());
    EXPECT_EQ(all.find(secret), std::string::npos);
    EXPECT_EQ(all.find(fleet::Sha256Hex(secret)), std::string::npos);
  }
}

TEST_F(ServeAudit, AnswersCarryAGeneratedRequestIdEvenWhenRefusedAtTheDoor) {
  auto anonymous = serve_->Connect("");
  auto first = anonymous->Call("GET", "/v1/containers", "", {{"X-Request-Id", "mine"}});
  auto second = admin_->Call("GET", "/healthz", "");
  ASSERT_TRUE(first && second);
  EXPECT_EQ(first->status, 401);
  EXPECT_EQ(first->headers["x-request-id"].rfind("r-", 0), 0u) << first->headers["x-request-id"];
  EXPECT_EQ(second->headers["x-request-id"].rfind("r-", 0), 0u);
  EXPECT_NE(first->headers["x-request-id"], second->headers["x-request-id"]);
}

TEST_F(ServeAudit, PagesFollowTheCursorAndFiltersNarrow) {
  const int64_t before_s = fleet::NowMs() / 1000 - 1;
  int status = 0;
  for (int i = 0; i < 7; ++i) {
    CallJson(*admin_, "PUT", "/v1/tenancies/page-" + std::to_string(i), "{}", &status);
    ASSERT_EQ(status, 200);
  }
  CallJson(*admin_, "PUT", "/v1/tenancies/page-0/storage", R"({"nfs":[]})", &status);
  ASSERT_EQ(status, 200);
  const auto everything = AllRecords();
  ASSERT_GE(everything.size(), 8u);

  // Pages of 3: the same records in the same order, each once.
  std::vector<int64_t> paged;
  std::string after;
  for (int page = 0; page < 100; ++page) {
    auto doc = CallJson(*admin_, "GET", "/v1/audit?limit=3" + after, "", &status);
    ASSERT_EQ(status, 200);
    EXPECT_LE(doc["records"].size(), 3u);
    for (const auto& record : doc["records"])
      paged.push_back(record["seq"].get<int64_t>());
    if (!doc.contains("next")) break;
    after = "&after=" + std::to_string(doc["next"].get<int64_t>());
  }
  std::vector<int64_t> whole;
  for (const auto& record : everything)
    whole.push_back(record["seq"].get<int64_t>());
  EXPECT_EQ(paged, whole);
  EXPECT_TRUE(std::is_sorted(whole.begin(), whole.end()));

  auto puts = AllRecords("action=tenancy.put");
  EXPECT_EQ(puts.size(), 7u);
  for (const auto& record : puts)
    EXPECT_EQ(record.value("action", ""), "tenancy.put");
  auto page0 = AllRecords("tenancy=page-0");
  ASSERT_EQ(page0.size(), 2u);
  EXPECT_EQ(page0[1].value("action", ""), "storage.put");
  EXPECT_EQ(AllRecords("tenancy=page-0&action=storage.put").size(), 1u);
  // Time: from <= time < to, Unix seconds.
  EXPECT_EQ(AllRecords("from=" + std::to_string(before_s)).size(), everything.size());
  EXPECT_TRUE(AllRecords("to=" + std::to_string(before_s)).empty());
  EXPECT_TRUE(AllRecords("from=" + std::to_string(before_s + 3600)).empty());
}

TEST_F(ServeAudit, QueryParametersAreStrict) {
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"limit=0", "query parameter limit"},
      {"limit=1001", "query parameter limit"},
      {"limit=1&limit=2", "query parameter limit: given more than once"},
      {"after=-1", "query parameter after"},
      {"after=x", "query parameter after"},
      {"tenancy=Not_A_Name", "query parameter tenancy"},
      {"action=DROP%20TABLE", "query parameter action"},
      {"from=10&to=5", "query parameter to: before from"},
      {"to=99999999999999", "query parameter to"},
      {"order=desc", "query parameter order: unknown"},
  };
  for (const auto& [query, message] : refused) {
    int status = 0;
    auto doc = CallJson(*admin_, "GET", "/v1/audit?" + query, "", &status);
    EXPECT_EQ(status, 400) << query;
    EXPECT_EQ(doc["error"].value("message", "").rfind(message, 0), 0u)
        << query << ": " << doc.dump();
  }
}

TEST_F(ServeAudit, OnlyTheAdminReadsTheTrail) {
  auto tenant = serve_->Connect(TenancyToken(*admin_, "alpha"));
  int status = 0;
  auto doc = CallJson(*tenant, "GET", "/v1/audit", "", &status);
  EXPECT_EQ(status, 403) << doc.dump();
  CallJson(*tenant, "GET", "/v1/audit?tenancy=alpha", "", &status);
  EXPECT_EQ(status, 403);
  CallJson(*admin_, "POST", "/v1/audit", "", &status);
  EXPECT_EQ(status, 405);
}

// Changes made in a loop from several connections while the service is killed with SIGKILL:
// after the restart every tenancy and container present has its "ok" record and every "ok"
// record's object is present, because each is one SQLite transaction with its change.
TEST_F(ServeAudit, KillNineAmidChangesNeverSplitsAChangeFromItsRecord) {
  const std::string tenant_token = TenancyToken(*admin_, "alpha");
  ASSERT_FALSE(tenant_token.empty());
  std::atomic<bool> stop{false};
  std::atomic<int> acknowledged{0};
  std::mutex mu;
  std::set<std::string> acked_tenancies, acked_containers;
  std::vector<std::thread> writers;
  const uint16_t port = serve_->port();
  for (int w = 0; w < 4; ++w) {
    writers.emplace_back([&, w] {
      const bool tenancies = w % 2 == 0;
      client::Connection connection({"127.0.0.1", port},
                                    tenancies ? serve_->admin_token() : tenant_token);
      for (int i = 0; !stop; ++i) {
        if (tenancies) {
          const std::string name = "k" + std::to_string(w) + "-" + std::to_string(i);
          auto response = connection.Call("PUT", "/v1/tenancies/" + name, "{}");
          if (!response) break;  // killed
          if (response->status == 200) {
            std::lock_guard lock(mu);
            acked_tenancies.insert(name);
          }
        } else {
          auto response =
              connection.Call("POST", "/v1/containers", R"({"image":"busybox","tenancy":"alpha"})");
          if (!response) break;
          auto doc = json::parse(response->body, nullptr, false);
          if (response->status == 202 && doc.is_object()) {
            std::lock_guard lock(mu);
            acked_containers.insert(doc.value("id", ""));
          }
        }
        ++acknowledged;
      }
    });
  }
  // Kill once a good number of changes went through, with the writers still sending.
  ASSERT_TRUE(WaitUntil([&] { return acknowledged >= 200; }));
  EXPECT_EQ(serve_->Kill(SIGKILL), 128 + SIGKILL);
  stop = true;
  for (auto& writer : writers)
    writer.join();
  StartServe({});

  int status = 0;
  std::set<std::string> tenancies, containers;
  auto listed = CallJson(*admin_, "GET", "/v1/tenancies", "", &status);
  ASSERT_EQ(status, 200);
  for (const auto& tenancy : listed["tenancies"])
    if (tenancy.value("name", "").rfind("k", 0) == 0) tenancies.insert(tenancy.value("name", ""));
  std::string after;
  for (int page = 0; page < 100; ++page) {
    auto doc =
        CallJson(*admin_, "GET", "/v1/containers?limit=1000&tenancy=alpha" + after, "", &status);
    ASSERT_EQ(status, 200);
    for (const auto& container : doc["containers"])
      containers.insert(container.value("id", ""));
    if (!doc.contains("next")) break;
    after = "&after=" + doc["next"].get<std::string>();
  }
  std::set<std::string> recorded_tenancies, recorded_containers;
  for (const auto& record : AllRecords("action=tenancy.put")) {
    const std::string name = record["object"].value("id", "");
    if (record.value("result", "") == "ok" && name.rfind("k", 0) == 0)
      recorded_tenancies.insert(name);
  }
  for (const auto& record : AllRecords("action=container.create"))
    if (record.value("result", "") == "ok")
      recorded_containers.insert(record["object"].value("id", ""));
  EXPECT_EQ(tenancies, recorded_tenancies);
  EXPECT_EQ(containers, recorded_containers);
  // What was acknowledged before the kill is there (a durable change, with its record).
  for (const auto& name : acked_tenancies)
    EXPECT_TRUE(tenancies.count(name)) << name;
  for (const auto& id : acked_containers)
    EXPECT_TRUE(containers.count(id)) << id;
  EXPECT_GE(tenancies.size() + containers.size(), 100u);
}

// Records older than --audit-retention go (in batches, by the retention sweep); newer ones stay.
TEST_F(ServeAudit, RetentionDeletesOldRecordsOnly) {
  int status = 0;
  CallJson(*admin_, "PUT", "/v1/tenancies/recent", "{}", &status);
  ASSERT_EQ(status, 200);
  serve_->Kill(SIGTERM);
  // 2,500 records from 100 days ago, written as the store would have: more than one batch.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((serve_->data_dir() + "/tessera.db").c_str(), &db), SQLITE_OK);
  const int64_t old_ms = fleet::NowMs() - int64_t{100} * 86400 * 1000;
  std::string sql = "BEGIN;";
  for (int i = 0; i < 2500; ++i)
    sql +=
        "INSERT INTO audit(time_ms, token_id, scope, action, object_kind, object_id, tenancy, "
        "result, request_id, detail) VALUES(" +
        std::to_string(old_ms + i) +
        ", 'admin', 'admin', 'tenancy.put', 'tenancy', 'old', 'old', 'ok', 'r-old', '');";
  sql += "COMMIT;";
  ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
  // The trail is append-only: an update is refused by the store itself.
  char* error = nullptr;
  EXPECT_NE(sqlite3_exec(db, "UPDATE audit SET result = 'ok'", nullptr, nullptr, &error),
            SQLITE_OK);
  EXPECT_NE(std::string(error ? error : "").find("never changed"), std::string::npos);
  sqlite3_free(error);
  sqlite3_close(db);

  StartServe({"--audit-retention", "30d", "--retention-sweep-interval", "100ms"});
  ASSERT_TRUE(WaitUntil([&] { return AllRecords("tenancy=old").empty(); }))
      << AllRecords("tenancy=old").size() << " old records left";
  auto recent = AllRecords("tenancy=recent");
  ASSERT_EQ(recent.size(), 1u);
  EXPECT_EQ(recent[0].value("action", ""), "tenancy.put");
}

TEST_F(ServeAudit, RetentionFlagIsRangeChecked) {
  serve_->Kill(SIGTERM);
  ServeProcess refused(dir_.path(),
                       NullBackendFlags(root_, dir_.path(), {"--audit-retention", "5m"}));
  std::string log;
  ASSERT_FALSE(refused.Start(&log));
  EXPECT_NE(log.find("--audit-retention 5m: must be from 1h to 3660d"), std::string::npos) << log;
}

}  // namespace
}  // namespace tessera::testing

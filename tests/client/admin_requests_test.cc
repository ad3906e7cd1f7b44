// What the operator verbs send: tenancy bodies from flags (a `set` that keeps what it does not
// name, since PUT replaces labels and the policy), token bodies, path segments that cannot
// steer the request elsewhere, audit paths, and the gathering of audit pages from a server that
// may never stop paging.
#include "client/admin_requests.h"

#include <gtest/gtest.h>

namespace tessera::client {
namespace {

using nlohmann::json;

json Stored() {
  return {{"name", "alpha"},
          {"uid", "u-0123456789abcdef"},
          {"created_ms", 1800000000000},
          {"labels", {{"team", "vision"}, {"tier", "gold"}}},
          {"extensions", {{"entitlement", "x"}}},
          {"quota", {{"gpus", 8}, {"pending", 10000}}},
          {"weight", 2.5},
          {"maxPriority", 10},
          {"rateLimit", nullptr},
          {"requeueOnGpuFault", true}};
}

TEST(NewTenancyBody, SendsOnlyWhatTheFlagsGive) {
  EXPECT_EQ(*NewTenancyBody({}), json::object());
  TenancyFlagValues flags;
  flags.weight = "0.5";
  flags.quota_gpus = "4";
  flags.quota_pending = "unlimited";
  flags.max_priority = "-20";
  flags.requeue_on_gpu_fault = false;
  flags.labels = {"team=vision", "empty=", "team=nlp", "url=a=b"};
  EXPECT_EQ(*NewTenancyBody(flags),
            json({{"weight", 0.5},
                  {"quota", {{"gpus", 4}, {"pending", nullptr}}},
                  {"maxPriority", -20},
                  {"requeueOnGpuFault", false},
                  {"labels", {{"team", "nlp"}, {"empty", ""}, {"url", "a=b"}}}}));
}

TEST(NewTenancyBody, RefusesMalformedFlagsNamingThem) {
  const std::vector<std::pair<std::string, TenancyFlagValues>> cases = [] {
    std::vector<std::pair<std::string, TenancyFlagValues>> out;
    for (const char* weight : {"", "heavy", "1e999", "nan", "inf", "2x", " 2"}) {
      TenancyFlagValues flags;
      flags.weight = weight;
      out.push_back({"--weight", flags});
    }
    for (const char* quota : {"", "-", "4.5", "none", "99999999999999999999", "0x10"}) {
      TenancyFlagValues flags;
      flags.quota_gpus = quota;
      out.push_back({"--quota-gpus", flags});
    }
    TenancyFlagValues priority;
    priority.max_priority = "high";
    out.push_back({"--max-priority", priority});
    for (const char* label : {"team", "=vision", "", "team-"}) {
      TenancyFlagValues flags;
      flags.labels = {label};
      out.push_back({"--label", flags});
    }
    return out;
  }();
  for (const auto& [flag, flags] : cases) {
    auto body = NewTenancyBody(flags);
    ASSERT_FALSE(body.ok()) << flag;
    EXPECT_EQ(body.error().category, ErrorCategory::kInvalidArgument);
    EXPECT_EQ(body.error().message.rfind(flag, 0), 0u) << body.error().message;
  }
}

TEST(ChangedTenancyBody, KeepsStoredLabelsAndLeavesThePolicyAloneWhenNoPolicyFlagIsGiven) {
  TenancyFlagValues flags;
  flags.labels = {"tier=silver", "team-", "new=1"};
  EXPECT_EQ(*ChangedTenancyBody(flags, Stored()),
            json({{"labels", {{"tier", "silver"}, {"new", "1"}}}}));
  flags.labels.clear();
  flags.requeue_on_gpu_fault = false;
  EXPECT_EQ(
      *ChangedTenancyBody(flags, Stored()),
      json({{"labels", {{"team", "vision"}, {"tier", "gold"}}}, {"requeueOnGpuFault", false}}));
}

TEST(ChangedTenancyBody, SendsTheWholeStoredPolicyWithTheFlagsChanges) {
  TenancyFlagValues flags;
  flags.quota_gpus = "unlimited";
  EXPECT_EQ(*ChangedTenancyBody(flags, Stored()),
            json({{"labels", {{"team", "vision"}, {"tier", "gold"}}},
                  {"weight", 2.5},
                  {"maxPriority", 10},
                  {"quota", {{"gpus", nullptr}, {"pending", 10000}}}}));
  flags = {};
  flags.weight = "3";
  flags.max_priority = "0";
  json stored = Stored();
  stored["quota"]["gpus"] = nullptr;
  stored.erase("labels");  // an older server's record: no labels
  EXPECT_EQ(*ChangedTenancyBody(flags, stored),
            json({{"labels", json::object()},
                  {"weight", 3.0},
                  {"maxPriority", 0},
                  {"quota", {{"gpus", nullptr}, {"pending", 10000}}}}));
}

TEST(ChangedTenancyBody, RefusesAStoredDocumentItCannotSendBackWhole) {
  TenancyFlagValues policy;
  policy.weight = "1";
  std::vector<std::pair<json, TenancyFlagValues>> cases;
  cases.push_back({json::array(), {}});
  cases.push_back({json("alpha"), {}});
  json labels_list = Stored();
  labels_list["labels"] = {"team", "vision"};
  cases.push_back({labels_list, {}});
  json label_number = Stored();
  label_number["labels"]["team"] = 7;
  cases.push_back({label_number, {}});
  for (const char* field : {"weight", "maxPriority", "quota"}) {
    json broken = Stored();
    broken[field] = "\x1b[2J";
    cases.push_back({broken, policy});
  }
  json pending = Stored();
  pending["quota"]["pending"] = 2.5;
  cases.push_back({pending, policy});
  json missing = Stored();
  missing["quota"].erase("gpus");
  cases.push_back({missing, policy});
  for (const auto& [stored, flags] : cases) {
    auto body = ChangedTenancyBody(flags, stored);
    ASSERT_FALSE(body.ok()) << stored;
    EXPECT_EQ(body.error().category, ErrorCategory::kUnavailable) << stored;
    for (char c : body.error().message)
      EXPECT_TRUE(c >= 0x20 && c < 0x7f);
  }
}

TEST(TokenRequestBody, SendsScopeAndExpiry) {
  EXPECT_EQ(*TokenRequestBody("", "", false), json::object());
  EXPECT_EQ(*TokenRequestBody("read-only", "30d", false),
            json({{"scope", "read-only"}, {"expiresInSeconds", 30 * 86400}}));
  EXPECT_EQ(*TokenRequestBody("", "12h", true), json({{"expiresInSeconds", 12 * 3600}}));
}

TEST(TokenRequestBody, RefusesUnknownScopesBadDurationsAndAScopeForMetrics) {
  for (auto [scope, expires, metrics] :
       std::vector<std::tuple<std::string, std::string, bool>>{{"admin", "", false},
                                                               {"metrics", "", false},
                                                               {"tenant", "", true},
                                                               {"", "30", false},
                                                               {"", "0d", false},
                                                               {"", "forever", true}}) {
    auto body = TokenRequestBody(scope, expires, metrics);
    ASSERT_FALSE(body.ok()) << scope << " " << expires;
    EXPECT_EQ(body.error().category, ErrorCategory::kInvalidArgument);
  }
}

TEST(PathSegment, TakesIdsAndNamesButNothingThatSteersThePath) {
  for (const char* ok : {"alpha", "t-0123abcd", "0000:18:00.0", "0000:18:00.0@node-1", "a.b_c~d"})
    EXPECT_TRUE(PathSegment(ok, "GPU").ok()) << ok;
  for (std::string bad :
       {std::string(), std::string("."), std::string(".."), std::string("../tokens"),
        std::string("a/b"), std::string("a?b=1"), std::string("a#b"), std::string("a b"),
        std::string("a%2Fb"), std::string("a\r\nX-Evil: 1"), std::string(254, 'a'),
        std::string("caf\xc3\xa9"), std::string("a\0b", 3)}) {
    auto segment = PathSegment(bad, "tenancy");
    ASSERT_FALSE(segment.ok()) << bad;
    EXPECT_EQ(segment.error().category, ErrorCategory::kInvalidArgument);
    for (char c : segment.error().message)
      EXPECT_TRUE(c >= 0x20 && c < 0x7f);
  }
  EXPECT_TRUE(PathSegment(std::string(253, 'a'), "token").ok());
}

TEST(QueryEscape, EscapesEverythingButUnreservedBytes) {
  EXPECT_EQ(QueryEscape("team-a_1.x~"), "team-a_1.x~");
  EXPECT_EQ(QueryEscape("a&b=c d/é\n"), "a%26b%3Dc%20d%2F%C3%A9%0A");
}

TEST(AuditPath, CarriesTheFiltersEscaped) {
  EXPECT_EQ(AuditPath({}, 100, 0, 1800000000), "/v1/audit?limit=100");
  AuditFilters filters{"alpha", "tenancy.put", 86400};
  EXPECT_EQ(AuditPath(filters, 1000, 42, 1800000000),
            "/v1/audit?limit=1000&after=42&tenancy=alpha&action=tenancy.put&from=1799913600");
  filters = {"a&limit=1", "x y", 5};
  EXPECT_EQ(AuditPath(filters, 7, 0, 3),
            "/v1/audit?limit=7&tenancy=a%26limit%3D1&action=x%20y&from=0");
}

json Page(std::vector<int64_t> seqs, json next) {
  json records = json::array();
  for (int64_t seq : seqs)
    records.push_back({{"seq", seq}});
  json page = {{"records", records}};
  if (!next.is_null()) page["next"] = next;
  return page;
}

TEST(AppendAuditPage, GathersPagesUpToTheLimit) {
  json records = json::array();
  EXPECT_EQ(*AppendAuditPage(records, Page({1, 2}, 2), 5, 0), 2);
  EXPECT_EQ(*AppendAuditPage(records, Page({3, 4}, 4), 5, 2), 4);
  EXPECT_EQ(*AppendAuditPage(records, Page({5}, nullptr), 5, 4), 0);
  EXPECT_EQ(records.size(), 5u);
  // A page with more than was asked for ends the gathering at the limit.
  records = json::array();
  EXPECT_EQ(*AppendAuditPage(records, Page({1, 2, 3}, 3), 2, 0), 0);
  EXPECT_EQ(records, json::array({{{"seq", 1}}, {{"seq", 2}}}));
}

TEST(AppendAuditPage, RefusesPagesThatAreNotAuditPagesOrWouldPageForever) {
  for (const auto& [page, after] :
       std::vector<std::pair<json, int64_t>>{{json::array(), 0},
                                             {json({{"records", "many"}}), 0},
                                             {json({{"next", 5}}), 0},
                                             {Page({1}, 0), 0},
                                             {Page({1}, 7), 7},
                                             {Page({1}, 3), 7},
                                             {Page({1}, "8"), 7},
                                             {Page({1}, -1), 0},
                                             {Page({1}, 1.5), 0},
                                             {Page({1}, json(18446744073709551615u)), 0}}) {
    json records = json::array();
    auto next = AppendAuditPage(records, page, 100, after);
    ASSERT_FALSE(next.ok()) << page;
    EXPECT_EQ(next.error().category, ErrorCategory::kUnavailable);
  }
}

}  // namespace
}  // namespace tessera::client

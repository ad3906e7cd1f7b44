// The operator verbs' tables from the API's answers: the columns each verb promises, and hostile
// documents (wrong types, huge strings, control characters) rendered bounded and printable, or
// refused as not the listing asked for.
#include "client/admin_views.h"

#include <gtest/gtest.h>

namespace tessera::client {
namespace {

using nlohmann::json;

constexpr int64_t kNowMs = 1800000000000;  // 2027-01-15T08:00:00Z

json Tenancy(const std::string& name) {
  return {{"name", name},
          {"uid", "u-0123456789abcdef"},
          {"created_ms", kNowMs - 3 * 3600 * 1000},
          {"labels", {{"team", "vision"}, {"cost-center", "42"}}},
          {"extensions", json::object()},
          {"quota", {{"gpus", 8}, {"pending", nullptr}}},
          {"weight", 2.5},
          {"maxPriority", 10},
          {"rateLimit", {{"perSecond", 20.0}, {"burst", 40}}},
          {"requeueOnGpuFault", true}};
}

void ExpectPrintableAndBounded(const Table& table) {
  for (const auto& row : table.rows) {
    ASSERT_EQ(row.size(), table.columns.size());
    for (const auto& cell : row) {
      EXPECT_LE(cell.size(), kMaxCellBytes + 3) << cell;
      for (char c : cell)
        EXPECT_TRUE(c >= 0x20 && c < 0x7f) << static_cast<int>(c) << " in " << cell;
    }
  }
}

TEST(TenancyTable, ShowsPolicyAndWideColumns) {
  auto table = TenancyTable({{"tenancies", json::array({Tenancy("alpha")})}}, kNowMs);
  ASSERT_TRUE(table.ok()) << table.error().message;
  EXPECT_EQ(RenderTable(*table, false, true),
            "NAME    WEIGHT   QUOTA-GPUS   QUOTA-PENDING   MAX-PRIORITY   REQUEUE   AGE\n"
            "alpha   2.5      8            unlimited       10             true      3h\n");
  EXPECT_EQ(RenderTable(*table, true, false),
            "alpha   2.5   8   unlimited   10   true   3h   u-0123456789abcdef   20.0/s burst 40"
            "   cost-center=42,team=vision\n");
}

TEST(TenancyTable, TakesOneTenancyAsItsOnlyRow) {
  auto table = TenancyTable(Tenancy("beta"), kNowMs);
  ASSERT_TRUE(table.ok()) << table.error().message;
  ASSERT_EQ(table->rows.size(), 1u);
  EXPECT_EQ(table->rows[0][0], "beta");
  EXPECT_EQ(table->rows[0][8], "20.0/s burst 40");
}

TEST(TenancyTable, RefusesADocumentThatIsNotATenancyListing) {
  for (const json& doc : {json(nullptr), json(42), json("tenancies"), json::array(),
                          json({{"tenancies", "alpha"}}), json({{"name", "alpha"}})}) {
    auto table = TenancyTable(doc, kNowMs);
    ASSERT_FALSE(table.ok()) << doc;
    EXPECT_EQ(table.error().category, ErrorCategory::kUnavailable);
  }
}

TEST(TenancyTable, RendersWrongTypesAsDashesOrTheirText) {
  json odd = {{"name", 7},
              {"quota", "lots"},
              {"weight", {1, 2}},
              {"maxPriority", nullptr},
              {"created_ms", "yesterday"},
              {"labels", {{"k", 5}}},
              {"rateLimit", 3}};
  auto table = TenancyTable({{"tenancies", {odd, 5, "x", nullptr}}}, kNowMs);
  ASSERT_TRUE(table.ok()) << table.error().message;
  ASSERT_EQ(table->rows.size(), 4u);
  EXPECT_EQ(table->rows[0], (std::vector<std::string>{"7", "[1,2]", "unlimited", "unlimited", "-",
                                                      "-", "-", "-", "-", "k=5"}));
  EXPECT_EQ(table->rows[1][0], "-");
  ExpectPrintableAndBounded(*table);
}

TEST(TenancyTable, CutsHugeAndControlCharacterText) {
  json hostile = Tenancy("\x1b[2J\x1b]0;owned\x07" + std::string(100000, 'a'));
  json labels = json::object();
  for (int i = 0; i < 500; ++i)
    labels["k" + std::to_string(i) + "\r\n"] = std::string(1000, '\x9b');
  hostile["labels"] = labels;
  hostile["uid"] = std::string(1 << 20, '\n');
  hostile["rateLimit"] = {{"perSecond", std::string(500, 'x')}, {"burst", std::string(500, 'y')}};
  auto table = TenancyTable({{"tenancies", json::array({hostile})}}, kNowMs);
  ASSERT_TRUE(table.ok()) << table.error().message;
  ExpectPrintableAndBounded(*table);
  const std::string text = RenderTable(*table, true, true);
  EXPECT_EQ(text.find('\x1b'), std::string::npos);
  EXPECT_LT(text.size(), 2000u);
}

json Token(const std::string& id, const json& tenancy, const json& last_used, const json& expires,
           bool expired) {
  return {{"id", id},
          {"scope", tenancy.is_null() ? "metrics" : "tenant"},
          {"tenancy", tenancy},
          {"created_ms", kNowMs - 2 * 86400 * 1000},
          {"last_used_ms", last_used},
          {"expires_ms", expires},
          {"expired", expired}};
}

TEST(TokenTable, ShowsNeverExpiredAndAges) {
  json doc = {{"tokens",
               {Token("t-0000000a", "alpha", kNowMs - 90000, nullptr, false),
                Token("t-0000000b", nullptr, nullptr, 1700000000000, true),
                Token("t-0000000c", "beta", nullptr, 1900000000000, false)}}};
  auto table = TokenTable(doc, kNowMs);
  ASSERT_TRUE(table.ok()) << table.error().message;
  EXPECT_EQ(RenderTable(*table, true, true),
            "ID           SCOPE     TENANCY   AGE   LAST-USED   EXPIRES                CREATED\n"
            "t-0000000a   tenant    alpha     2d    90s         never                  "
            "2027-01-13T08:00:00Z\n"
            "t-0000000b   metrics   -         2d    never       expired                "
            "2027-01-13T08:00:00Z\n"
            "t-0000000c   tenant    beta      2d    never       2030-03-17T17:46:40Z   "
            "2027-01-13T08:00:00Z\n");
}

TEST(TokenTable, RefusesANonListingAndBoundsHostileCells) {
  EXPECT_TRUE(TokenTable({{"tokens", json::array({json{{"id", 1}}})}}, kNowMs).ok());
  EXPECT_FALSE(TokenTable({{"token", "x"}}, kNowMs).ok());
  json hostile = Token(std::string(5000, '\x07'), std::string(5000, '\x1b'), "soon", -5, false);
  hostile["created_ms"] = 1e300;
  auto table = TokenTable({{"tokens", json::array({hostile})}}, kNowMs);
  ASSERT_TRUE(table.ok());
  ExpectPrintableAndBounded(*table);
  EXPECT_EQ(table->rows[0][3], "-");  // an absurd creation time is no age
  EXPECT_EQ(table->rows[0][4], "never");
  EXPECT_EQ(table->rows[0][5], "-");
}

TEST(CreatedToken, ShowsTheSecretOnceInTheTableAndWholeForScripts) {
  json created = Token("t-0000000d", "alpha", nullptr, nullptr, false);
  created["token"] = "tsk_0123456789abcdef0123456789abcdef";
  auto table = CreatedTokenTable(created);
  ASSERT_TRUE(table.ok());
  EXPECT_EQ(RenderTable(*table, false, true),
            "ID           SCOPE    TENANCY   EXPIRES   TOKEN\n"
            "t-0000000d   tenant   alpha     never     tsk_0123456789abcdef0123456789abcdef\n");
  EXPECT_EQ(*CreatedTokenSecret(created), "tsk_0123456789abcdef0123456789abcdef");
}

TEST(CreatedToken, RefusesASecretAScriptCouldNotKeepSafely) {
  for (const json& secret :
       {json(nullptr), json(12345678901234567), json("short"), json("0123456789abcdef\n; rm -rf /"),
        json("0123456789 abcdef"), json("\x1b]52;c;AAAA\x07" + std::string(20, 'a')),
        json(std::string(513, 'a'))}) {
    json created = {{"id", "t-1"}, {"token", secret}};
    auto kept = CreatedTokenSecret(created);
    ASSERT_FALSE(kept.ok()) << secret;
    EXPECT_EQ(kept.error().category, ErrorCategory::kUnavailable);
  }
  EXPECT_FALSE(CreatedTokenTable({{"id", "t-1"}}).ok());
  EXPECT_FALSE(CreatedTokenTable(json::array()).ok());
}

json Gpu(const std::string& pci, const std::string& node, const json& health) {
  return {{"id", node.empty() ? pci : pci + "@" + node},
          {"node", node},
          {"pci_address", pci},
          {"model", "NVIDIA H100 80GB HBM3"},
          {"state", "free"},
          {"reason", ""},
          {"tenancy", ""},
          {"container_id", ""},
          {"health", health}};
}

json FaultedHealth() {
  return {{"step", "resetting"},
          {"reason", "gpu-fault: Xid 79 (GPU has fallen off the bus) on 0000:9d:00.0"},
          {"attempts", 1},
          {"last_fault",
           {{"at_ms", 1700000001000},
            {"signal", "xid"},
            {"xid", 79},
            {"class", "gpu"},
            {"action", "stop-gpu"},
            {"reason", "gpu-fault: Xid 79"}}}};
}

TEST(GpuTable, ShowsHolderHealthAndReasonAndWideFaults) {
  json held = Gpu("0000:18:00.0", "", {{"step", "healthy"}, {"reason", ""}});
  held["state"] = "active";
  held["tenancy"] = "alpha";
  held["container_id"] = "c-0123456789ab";
  json drained = Gpu("0000:2a:00.0", "node-b", {{"step", "healthy"}, {"reason", ""}});
  drained["state"] = "draining";
  drained["reason"] = "firmware upgrade";
  json faulted = Gpu("0000:9d:00.0", "", FaultedHealth());
  faulted["state"] = "quarantined";
  json doc = {{"gpus", {held, drained, faulted}}};
  auto table = GpuTable(doc, {{"0000:9d:00.0", 2}});
  ASSERT_TRUE(table.ok()) << table.error().message;
  EXPECT_EQ(
      RenderTable(*table, false, true),
      "ID                    NODE     MODEL                   STATE         TENANCY   CONTAINER  "
      "      HEALTH      REASON\n"
      "0000:18:00.0          -        NVIDIA H100 80GB HBM3   active        alpha     "
      "c-0123456789ab   healthy     -\n"
      "0000:2a:00.0@node-b   node-b   NVIDIA H100 80GB HBM3   draining      -         -         "
      "       healthy     firmware upgrade\n"
      "0000:9d:00.0          -        NVIDIA H100 80GB HBM3   quarantined   -         -         "
      "       resetting   gpu-fault: Xid 79 (GPU has fallen off the bus) on 0000:9d:00.0\n");
  const std::string wide = RenderTable(*table, true, false);
  EXPECT_NE(wide.find("0000:9d:00.0   2   2023-11-14T22:13:21Z Xid 79 (gpu, stop-gpu)\n"),
            std::string::npos)
      << wide;
  EXPECT_NE(wide.find("0000:18:00.0   0   -\n"), std::string::npos) << wide;
}

TEST(GpuTable, CountsAFaultedGpuWhoseHistoryIsUnknownAsAQuestionMark) {
  auto table = GpuTable({{"gpus", json::array({Gpu("0000:9d:00.0", "", FaultedHealth())})}}, {});
  ASSERT_TRUE(table.ok());
  EXPECT_EQ(table->rows[0][9], "?");
}

TEST(GpuTable, CountsFaultsFromTheListingWithoutAskingAgain) {
  json health = FaultedHealth();
  health["fault_count"] = 7;
  const json doc = {{"gpus", json::array({Gpu("0000:9d:00.0", "", health)})}};
  EXPECT_TRUE(GpusWithFaults(doc, 10).empty());
  auto table = GpuTable(doc, {});
  ASSERT_TRUE(table.ok()) << table.error().message;
  EXPECT_EQ(table->rows[0][9], "7");
}

TEST(GpuTable, TakesOneGpuAsAnActionAnswersIt) {
  auto table = GpuTable(Gpu("0000:18:00.0", "", nullptr), {});
  ASSERT_TRUE(table.ok()) << table.error().message;
  ASSERT_EQ(table->rows.size(), 1u);
  EXPECT_EQ(table->rows[0][6], "-");  // no health: an older server
}

TEST(GpuTable, BoundsHostileListings) {
  EXPECT_TRUE(GpuTable({{"gpus", json::array({json{{"a", 1}}})}}, {}).ok());
  EXPECT_FALSE(GpuTable({{"leases", json::array()}}, {}).ok());
  json hostile = Gpu(std::string(70000, '\x1b'), "\r\n\r\n", {{"step", {1, 2, 3}}});
  hostile["health"]["last_fault"] = {
      {"xid", "79; rm"}, {"signal", std::string(9000, '\x7f')}, {"at_ms", -1}};
  hostile["model"] = 1e308;
  hostile["reason"] = json::object();
  auto table = GpuTable({{"gpus", {hostile, 3, nullptr, "gpu"}}}, {});
  ASSERT_TRUE(table.ok());
  ExpectPrintableAndBounded(*table);
  EXPECT_EQ(table->rows[0][7], "-");  // neither its own reason nor its health's is text
}

TEST(GpusWithFaults, NamesOnlyFaultedGpusWithIdsFitForAPath) {
  json traversal = Gpu("../../v1/tokens", "", FaultedHealth());
  json query = Gpu("0000:aa:00.0?x=1", "", FaultedHealth());
  json doc = {
      {"gpus",
       {Gpu("0000:18:00.0", "", {{"step", "healthy"}}), Gpu("0000:9d:00.0", "", FaultedHealth()),
        traversal, query, Gpu("0000:ab:00.0", "node-b", FaultedHealth())}}};
  EXPECT_EQ(GpusWithFaults(doc, 10),
            (std::vector<std::string>{"0000:9d:00.0", "0000:ab:00.0@node-b"}));
  EXPECT_EQ(GpusWithFaults(doc, 1), (std::vector<std::string>{"0000:9d:00.0"}));
  EXPECT_TRUE(GpusWithFaults(json("gpus"), 10).empty());
}

TEST(FaultHistoryCount, CountsTheHistoryOfOneGpu) {
  json gpu = Gpu("0000:9d:00.0", "", FaultedHealth());
  EXPECT_FALSE(FaultHistoryCount(gpu).has_value());
  gpu["health"]["history"] = json::array({json::object(), json::object(), json::object()});
  EXPECT_EQ(FaultHistoryCount(gpu), 3u);
  EXPECT_FALSE(FaultHistoryCount(json(5)).has_value());
  EXPECT_FALSE(FaultHistoryCount({{"health", {{"history", "many"}}}}).has_value());
}

json Record(int64_t seq, const std::string& action, const std::string& tenancy) {
  return {{"seq", seq},
          {"time_ms", 1800000000000 + seq * 1000},
          {"token_id", seq == 1 ? "" : "t-0000000a"},
          {"scope", seq == 1 ? "admin" : "tenant"},
          {"action", action},
          {"object", {{"kind", "tenancy"}, {"id", tenancy}}},
          {"tenancy", tenancy},
          {"result", "ok"},
          {"request_id", "r-" + std::to_string(seq)},
          {"detail", "created"}};
}

TEST(AuditTable, ShowsEachRecordWithItsObjectAndRequestWhenWide) {
  json doc = {
      {"records", {Record(1, "tenancy.put", "alpha"), Record(2, "container.create", "alpha")}}};
  auto table = AuditTable(doc);
  ASSERT_TRUE(table.ok()) << table.error().message;
  EXPECT_EQ(
      RenderTable(*table, true, true),
      "SEQ   TIME                   TOKEN        ACTION             OBJECT          TENANCY   "
      "RESULT   DETAIL    REQUEST\n"
      "1     2027-01-15T08:00:01Z   admin        tenancy.put        tenancy/alpha   alpha     "
      "ok       created   r-1\n"
      "2     2027-01-15T08:00:02Z   t-0000000a   container.create   tenancy/alpha   alpha     "
      "ok       created   r-2\n");
}

TEST(AuditTable, BoundsHostileRecords) {
  EXPECT_FALSE(AuditTable({{"records", "none"}}).ok());
  json hostile = Record(3, std::string(10000, '\x1b'), "x");
  hostile["object"] = {{"kind", std::string(200, 'k')}, {"id", std::string(200, '\n')}};
  hostile["detail"] = std::string(1 << 16, '\x9b');
  hostile["seq"] = "three";
  auto table = AuditTable({{"records", {hostile, 1, json::array()}}});
  ASSERT_TRUE(table.ok());
  ExpectPrintableAndBounded(*table);
}

}  // namespace
}  // namespace tessera::client

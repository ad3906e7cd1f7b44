// The read verbs' rows (`tessera ps`, `queue`, `usage`) from well-formed and hostile answers:
// wrong types, huge strings, control characters, deep nesting.
#include "client/views.h"

#include <gtest/gtest.h>

#include <string>

#include "client/usage_view.h"

namespace tessera::client {
namespace {

using nlohmann::json;

constexpr int64_t kNow = 1764446172000;  // 2025-11-29T19:56:12Z

json Container() {
  return {{"id", "c-0123456789abcdef"},
          {"tenancy", "team-a"},
          {"image", "busybox"},
          {"state", "running"},
          {"gpus_requested", 2},
          {"created_ms", kNow - 90 * 1000},
          {"started_ms", kNow - 60 * 1000},
          {"finished_ms", 0},
          {"exit_code", nullptr},
          {"reason", ""},
          {"mig", nullptr},
          {"share", nullptr}};
}

std::string Wide(const Table& table) {
  return RenderTable(table, true, true);
}

TEST(ContainersTable, ARecordsCells) {
  json c = Container();
  c["ports"] = json::array({{{"container_port", 8080},
                             {"protocol", "tcp"},
                             {"host_address", "127.0.0.1"},
                             {"host_port", 40001},
                             {"address", "127.0.0.1:40001"}},
                            {{"container_port", 53}, {"protocol", "udp"}, {"address", ""}}});
  Table table = ContainersTable(json::array({c}), kNow);
  ASSERT_EQ(table.rows.size(), 1u);
  ASSERT_EQ(table.rows[0].size(), table.columns.size());
  EXPECT_EQ(table.rows[0][0], "c-0123456789abcdef");
  EXPECT_EQ(table.rows[0][4], "2");
  EXPECT_EQ(table.rows[0][5], "90s");
  EXPECT_EQ(table.rows[0][6], "-");
  EXPECT_EQ(table.rows[0][7], "2025-11-29T19:54:42Z");
  EXPECT_EQ(table.rows[0][9], "-");  // not finished
  EXPECT_EQ(table.rows[0][11], "127.0.0.1:40001->8080/tcp,53/udp");
  // The table shows the first seven columns; wide all of them.
  EXPECT_EQ(RenderTable(table, false, true).find("CREATED"), std::string::npos);
  EXPECT_NE(Wide(table).find("PORTS"), std::string::npos);
}

TEST(ContainersTable, MigAndSharesAndManyPorts) {
  json mig = Container();
  mig["mig"] = {{"profile", "1g.10gb"}, {"count", 2}};
  json share = Container();
  share["share"] = {{"memory", "20Gi"}};
  share["share_gpus"] = 0.25;
  json ports = Container();
  ports["ports"] = json::array();
  for (int i = 0; i < 100; ++i)
    ports["ports"].push_back({{"container_port", i}, {"protocol", "tcp"}});
  Table table = ContainersTable(json::array({mig, share, ports}), kNow);
  EXPECT_EQ(table.rows[0][4], "1g.10gbx2");
  EXPECT_EQ(table.rows[1][4], "0.25");
  EXPECT_EQ(table.rows[2][11], "0/tcp,1/tcp,2/tcp,3/tcp,+96");
}

TEST(ContainersTable, WrongTypesAreMarkedNotTrusted) {
  json c = {{"id", 17},         {"tenancy", json::array({1, 2})}, {"image", {{"x", 1}}},
            {"state", true},    {"gpus_requested", "all"},        {"created_ms", "yesterday"},
            {"started_ms", -5}, {"finished_ms", 1e308},           {"exit_code", json::object()},
            {"ports", "8080"},  {"queue_position", nullptr}};
  Table table = ContainersTable(json::array({c, 42, "text", nullptr, json::array()}), kNow);
  ASSERT_EQ(table.rows.size(), 5u);
  EXPECT_EQ(table.rows[0][0], "17");
  EXPECT_EQ(table.rows[0][1], "?");
  EXPECT_EQ(table.rows[0][2], "?");
  EXPECT_EQ(table.rows[0][3], "true");
  EXPECT_EQ(table.rows[0][4], "all");
  EXPECT_EQ(table.rows[0][5], "?");
  EXPECT_EQ(table.rows[0][8], "-");  // a negative time is no time
  EXPECT_EQ(table.rows[0][9], "-");  // beyond int64: no time either
  EXPECT_EQ(table.rows[0][10], "?");
  EXPECT_EQ(table.rows[0][11], "?");
  // Items that are not objects: every cell "-", nothing thrown.
  for (size_t i = 1; i < 5; ++i)
    for (const auto& cell : table.rows[i])
      EXPECT_EQ(cell, "-");
  // Not a list at all: no rows.
  EXPECT_TRUE(ContainersTable(json("containers"), kNow).rows.empty());
  EXPECT_TRUE(ContainersTable(json::object(), kNow).rows.empty());
}

TEST(ContainersTable, HugeStringsAndControlCharactersAreCut) {
  json c = Container();
  c["id"] = std::string(1 << 20, 'a');
  c["image"] = "busybox\x1b[2J\r\nevil\x07";
  c["reason"] = std::string("\xff\xfe\x00z", 4);
  c["ports"] = json::array({{{"container_port", std::string(5000, '9')},
                             {"protocol", "tcp\n"},
                             {"address", std::string(5000, 'h')}}});
  Table table = ContainersTable(json::array({c}), kNow);
  for (const auto& cell : table.rows[0]) {
    EXPECT_LE(cell.size(), kMaxCellBytes + 3);  // "..." marks the cut
    for (char ch : cell)
      EXPECT_TRUE(ch >= 0x20 && ch < 0x7f) << static_cast<int>(ch);
  }
  EXPECT_EQ(table.rows[0][2].rfind("busybox?", 0), 0u);
}

TEST(ContainersTable, DeepNestingIsShownAsMarkNotWalked) {
  // Deeper than any parse the session allows, built in memory: a cell never walks into it.
  json deep = json::array();
  for (int i = 0; i < 200; ++i)
    deep = json::array({deep});
  json c = Container();
  c["image"] = deep;
  c["mig"] = {{"profile", deep}, {"count", deep}};
  Table table = ContainersTable(json::array({c}), kNow);
  EXPECT_EQ(table.rows[0][2], "?");
  EXPECT_EQ(table.rows[0][4], "?x?");
}

TEST(ContainersQuery, ValuesAreEncoded) {
  EXPECT_EQ(ContainersQuery("pending,running", "", ""),
            "/v1/containers?limit=500&state=pending,running");
  EXPECT_EQ(ContainersQuery("", "team a&x=1", "c-1/../"),
            "/v1/containers?limit=500&tenancy=team%20a%26x%3D1&after=c-1%2F..%2F");
}

TEST(QueueTable, EntriesAndShares) {
  json doc = {{"queue_total", 2},
              {"queue", json::array({{{"id", "c-1"},
                                      {"tenancy", "team-a"},
                                      {"gpus", 8},
                                      {"priority", 0},
                                      {"queue_position", 1},
                                      {"reason", "waiting: tenancy quota 8/8 GPUs in use"},
                                      {"created_ms", kNow - 3 * 3600 * 1000}},
                                     "junk"})},
              {"tenancies", json::array({{{"name", "team-a"},
                                          {"weight", 1.0},
                                          {"quota", {{"gpus", nullptr}}},
                                          {"gpus_in_use", 8},
                                          {"pending", 1},
                                          {"share", 0.5},
                                          {"target_share", 1.0 / 3}},
                                         {{"name", "team-b"}, {"share", "x"}}})}};
  Table queue = QueueTable(doc, kNow);
  ASSERT_EQ(queue.rows.size(), 2u);
  EXPECT_EQ(queue.rows[0], (std::vector<std::string>{"1", "c-1", "team-a", "8", "0", "3h",
                                                     "waiting: tenancy quota 8/8 GPUs in use"}));
  Table shares = QueueSharesTable(doc);
  ASSERT_EQ(shares.rows.size(), 2u);
  EXPECT_EQ(shares.rows[0],
            (std::vector<std::string>{"team-a", "1.0", "unlimited", "8", "1", "0.500", "0.333"}));
  EXPECT_EQ(shares.rows[1][2], "-");  // no quota given is not unlimited
  EXPECT_EQ(shares.rows[1][5], "x");
  EXPECT_TRUE(QueueTable(json::array(), kNow).rows.empty());
  EXPECT_TRUE(QueueSharesTable(json{{"tenancies", 5}}).rows.empty());
}

TEST(UsageTable, RunsAndTotal) {
  json doc = {{"tenancy", "team-a"},
              {"gpu_seconds", 9000.0},
              {"sm_seconds", nullptr},
              {"energy_joules", 7.2e6},
              {"containers", json::array({{{"id", "c-1"},
                                           {"gpus", 2},
                                           {"started_ms", kNow - 3600 * 1000},
                                           {"finished_ms", nullptr},
                                           {"gpu_seconds", 7200.0},
                                           {"sm_seconds", 3600.0},
                                           {"energy_joules", 3.6e6}}})}};
  Table table = UsageTable(doc);
  ASSERT_EQ(table.rows.size(), 2u);
  EXPECT_EQ(table.rows[0], (std::vector<std::string>{"c-1", "2", "2025-11-29T18:56:12Z", "running",
                                                     "2.00", "1.00", "1.000"}));
  EXPECT_EQ(table.rows[1], (std::vector<std::string>{"TOTAL", "", "", "", "2.50", "-", "2.000"}));
  EXPECT_EQ(RenderCsv(table, true).substr(0, 59),
            "ID,GPUS,STARTED,FINISHED,GPU-HOURS,SM-HOURS,ENERGY-KWH\r\nc-1");
}

TEST(UsageTable, HostileFigures) {
  json doc = {{"gpu_seconds", "lots"},
              {"energy_joules", 1e300},
              {"containers", json::array({{{"gpu_seconds", json::array()}}, 7})},
              {"series", json::array({{{"start_ms", "now"}, {"gpu_seconds", -3600.0}}, "x"})}};
  Table table = UsageTable(doc);
  ASSERT_EQ(table.rows.size(), 3u);
  EXPECT_EQ(table.rows[0][4], "?");
  EXPECT_EQ(table.rows[2][4], "?");
  EXPECT_EQ(table.rows[2][6], "?");  // too large to be a figure
  Table series = UsageSeriesTable(doc);
  ASSERT_EQ(series.rows.size(), 2u);
  EXPECT_EQ(series.rows[0], (std::vector<std::string>{"?", "-1.00", "-", "-"}));
  EXPECT_TRUE(UsageSeriesTable(json::object()).rows.empty());
  // A total row even for no answer at all.
  EXPECT_EQ(UsageTable(json(nullptr)).rows.size(), 1u);
}

TEST(UsageBounds, DurationsAndTimes) {
  EXPECT_EQ(*ParseDurationSeconds("90s", "--step"), 90);
  EXPECT_EQ(*ParseDurationSeconds("1h", "--step"), 3600);
  EXPECT_EQ(*ParseDurationSeconds("7d", "--step"), 7 * 86400);
  for (const char* bad : {"", "h", "1", "0h", "-1h", "1.5h", "1w", "99999999999d", "1 h"})
    EXPECT_FALSE(ParseDurationSeconds(bad, "--step").ok()) << bad;
  EXPECT_EQ(*ParseTimeBound("24h", kNow, "--since"), kNow / 1000 - 86400);
  EXPECT_EQ(*ParseTimeBound("2025-11-29T19:56:12Z", kNow, "--since"), kNow / 1000);
  EXPECT_EQ(*ParseTimeBound("2025-11-29T20:56:12.250+01:00", kNow, "--since"), kNow / 1000);
  EXPECT_EQ(*ParseTimeBound("1970-01-01T00:00:00Z", kNow, "--since"), 0);
  for (const char* bad : {"2025-11-29", "2025-13-01T00:00:00Z", "2025-11-29T19:56:12",
                          "2025-11-29T19:56:12+0100", "1969-12-31T23:59:59Z", "yesterday"})
    EXPECT_FALSE(ParseTimeBound(bad, kNow, "--since").ok()) << bad;
  auto error = ParseTimeBound(std::string(10000, '\x1b'), kNow, "--since");
  ASSERT_FALSE(error.ok());
  EXPECT_LT(error.error().message.size(), 200u);
  EXPECT_EQ(error.error().message.find('\x1b'), std::string::npos);
}

TEST(UsageBounds, QueryAndTheOnlyTenancy) {
  EXPECT_EQ(UsageQuery("team-a", 0, -1, 0), "/v1/tenancies/team-a/usage?from=0");
  EXPECT_EQ(UsageQuery("a/../b", 10, 20, 3600),
            "/v1/tenancies/a%2F..%2Fb/usage?from=10&to=20&step=3600");
  EXPECT_EQ(*OnlyTenancy(json{{"tenancies", json::array({{{"name", "team-a"}}})}}), "team-a");
  EXPECT_FALSE(OnlyTenancy(json{{"tenancies", json::array()}}).ok());
  EXPECT_FALSE(
      OnlyTenancy(json{{"tenancies", json::array({{{"name", "a"}}, {{"name", "b"}}})}}).ok());
  EXPECT_FALSE(OnlyTenancy(json{{"tenancies", json::array({{{"name", 5}}})}}).ok());
  EXPECT_FALSE(OnlyTenancy(json("tenancies")).ok());
}

}  // namespace
}  // namespace tessera::client

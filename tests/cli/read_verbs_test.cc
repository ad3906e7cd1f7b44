// The read verbs (ps, inspect, queue, usage) of the real `tessera` binary against a real
// tessera-serve with the null backend (a container ends as soon as it starts): their output in
// table and JSON form compared with golden files, and what each kind of token may read.
#include <gtest/gtest.h>

#include <algorithm>
#include <ctime>

#include "cli/golden.h"
#include "serve/container_wait.h"
#include "serve/null_serve_fixture.h"

namespace tessera::testing {
namespace {

using nlohmann::json;

// Figures that change from run to run: fair shares decay, metered seconds depend on how long the
// null backend took to end a container.
const std::vector<GoldenRule> kFigureRules = {
    {"\"(share|target_share|gpu_seconds)\": [-0-9.e+]+", "\"$1\": <n>"},
    {"\\b\\d\\.\\d{3}\\b", "<f>"},
    // The GPUs the placement chose.
    {"\"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\\.[0-7]\"", "\"<pci>\""},
};

// An RFC 3339 time of the hour that holds now, `hours` later (earlier when negative).
std::string HourFromNow(int hours) {
  const int64_t now = std::time(nullptr);
  const std::time_t at = now - now % 3600 + hours * 3600;
  std::tm utc{};
  gmtime_r(&at, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

class ReadVerbs : public NullServeTest {
 protected:
  void SetUp() override {
    NullServeTest::SetUp();
    WriteGpuRoms(root_);  // released GPUs pass their check whichever test wrote the ROMs first
    StartServe();
    server_ = "http://127.0.0.1:" + std::to_string(serve_->port());
    int status = 0;
    // team-a may hold one GPU at a time: its two-GPU request waits.
    CallJson(*admin_, "PUT", "/v1/tenancies/team-a", R"({"quota":{"gpus":1}})", &status);
    ASSERT_EQ(status, 200);
    team_a_ = TenancyToken(*admin_, "team-a");
    team_b_ = TenancyToken(*admin_, "team-b");
    ASSERT_FALSE(team_a_.empty());
    ASSERT_FALSE(team_b_.empty());
    auto read_only = CallJson(*admin_, "POST", "/v1/tenancies/team-a/tokens",
                              R"({"scope":"read-only"})", &status);
    ASSERT_EQ(status, 201) << read_only;
    read_only_ = read_only["token"];
    a_ended_ = Submit(team_a_, "team-a", 1);
    ASSERT_FALSE(WaitForContainerState(*admin_, *serve_, a_ended_, {"exited"}).is_null());
    b_ended_ = Submit(team_b_, "team-b", 1);
    ASSERT_FALSE(WaitForContainerState(*admin_, *serve_, b_ended_, {"exited"}).is_null());
    a_pending_ = Submit(team_a_, "team-a", 2);
    auto pending = WaitForContainerState(*admin_, *serve_, a_pending_, {"pending"});
    ASSERT_EQ(pending.value("state", ""), "pending") << pending;
  }

  std::string Submit(const std::string& token, const std::string& tenancy, int gpus) {
    auto connection = serve_->Connect(token);
    json body = {{"image", "busybox"}, {"tenancy", tenancy}, {"gpus", gpus}, {"command", {"true"}}};
    int status = 0;
    auto answer = CallJson(*connection, "POST", "/v1/containers", body.dump(), &status);
    EXPECT_EQ(status, 202) << answer;
    return answer.value("id", "");
  }

  // Runs the verb with `token` and compares with golden/<name>.txt; returns the result.
  CliResult Golden(const std::string& name, const std::string& token,
                   const std::vector<std::string>& args) {
    TesseraCli cli(server_, token);
    CliResult result = cli.Run(args);
    ExpectGolden(name, result, serve_->port(), kFigureRules);
    return result;
  }

  std::string server_, team_a_, team_b_, read_only_;
  std::string a_ended_, b_ended_, a_pending_;
};

TEST_F(ReadVerbs, PsListsWhatTheTokenSees) {
  const std::string admin = serve_->admin_token();
  auto running = Golden("ps-admin", admin, {"ps"});
  EXPECT_EQ(running.exit_code, 0) << running.err;
  EXPECT_NE(running.out.find(a_pending_), std::string::npos);
  EXPECT_EQ(running.out.find(a_ended_), std::string::npos);  // ended: only with -a
  auto all = Golden("ps-admin-all", admin, {"ps", "-a"});
  for (const auto& id : {a_ended_, b_ended_, a_pending_})
    EXPECT_NE(all.out.find(id), std::string::npos) << id;
  Golden("ps-admin-wide", admin, {"ps", "-a", "-o", "wide"});
  Golden("ps-admin-exited", admin,
         {"ps", "--state", "exited", "--tenancy", "team-b", "--no-headers"});
  auto listed = Golden("ps-admin-json", admin, {"ps", "-a", "-o", "json"});
  auto doc = json::parse(listed.out, nullptr, false);
  ASSERT_TRUE(doc.is_object()) << listed.out;
  EXPECT_EQ(doc["containers"].size(), 3u);
  // A tenant: its own containers only, whatever it asks for.
  auto own = Golden("ps-tenant-all", team_a_, {"ps", "-a"});
  EXPECT_EQ(own.exit_code, 0) << own.err;
  EXPECT_NE(own.out.find(a_ended_), std::string::npos);
  EXPECT_EQ(own.out.find(b_ended_), std::string::npos);
  auto other = Golden("ps-tenant-other-tenancy", team_a_, {"ps", "-a", "--tenancy", "team-b"});
  EXPECT_EQ(other.out.find(b_ended_), std::string::npos);
  Golden("ps-tenant-json", team_b_, {"ps", "-a", "-o", "json"});
  // A read-only token reads as well.
  auto read_only = Golden("ps-read-only", read_only_, {"ps", "-a"});
  EXPECT_EQ(read_only.exit_code, 0) << read_only.err;
  EXPECT_NE(read_only.out.find(a_ended_), std::string::npos);
  // A format it does not print is refused; an unknown token is 6.
  EXPECT_NE(Golden("ps-bad-output", admin, {"ps", "-o", "xml"}).exit_code, 0);
  EXPECT_EQ(Golden("ps-unknown-token", "no-such-token", {"ps"}).exit_code, 6);
}

TEST_F(ReadVerbs, PsFollowsPagesToTheEnd) {
  // More than one page (500 records): every container is listed once, in creation order.
  std::vector<std::string> ids = {a_ended_, b_ended_, a_pending_};
  for (int i = 0; i < 520; ++i) {
    ids.push_back(Submit(serve_->admin_token(), "team-c", 0));
    ASSERT_FALSE(ids.back().empty());
  }
  // The API's first page ends before them all.
  auto first = CallJson(*admin_, "GET", "/v1/containers?limit=500");
  ASSERT_TRUE(first.contains("next")) << first.dump().substr(0, 300);
  TesseraCli cli(server_, serve_->admin_token());
  auto listed = cli.Run({"ps", "-a", "-o", "json"});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  auto doc = json::parse(listed.out, nullptr, false);
  ASSERT_TRUE(doc.is_object()) << listed.out.substr(0, 300);
  ASSERT_EQ(doc["containers"].size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i)
    EXPECT_EQ(doc["containers"][i].value("id", ""), ids[i]) << i;
  auto table = cli.Run({"ps", "-a", "--no-headers", "--tenancy", "team-c"});
  EXPECT_EQ(std::count(table.out.begin(), table.out.end(), '\n'), 520) << table.err;
}

TEST_F(ReadVerbs, InspectShowsRecordsOfTheTokensTenancyOnly) {
  auto one = Golden("inspect-tenant", team_a_, {"inspect", a_ended_});
  EXPECT_EQ(one.exit_code, 0) << one.err;
  auto record = json::parse(one.out, nullptr, false);
  EXPECT_EQ(record.value("id", ""), a_ended_) << one.out;
  EXPECT_EQ(record.value("state", ""), "exited");
  Golden("inspect-tenant-yaml", team_a_, {"inspect", "-o", "yaml", a_pending_});
  auto two = Golden("inspect-admin-two", serve_->admin_token(), {"inspect", a_ended_, b_ended_});
  EXPECT_EQ(json::parse(two.out, nullptr, false).size(), 2u) << two.out;
  // Another tenancy's container is not found (3), as an ID that never was.
  auto other = Golden("inspect-other-tenancy", team_a_, {"inspect", b_ended_});
  EXPECT_EQ(other.exit_code, 3) << other.err;
  EXPECT_TRUE(other.out.empty());
  EXPECT_EQ(Golden("inspect-unknown", team_a_, {"inspect", "c-0000000000000000"}).exit_code, 3);
  EXPECT_EQ(Golden("inspect-malformed", team_a_, {"inspect", "../tokens"}).exit_code, 2);
}

TEST_F(ReadVerbs, QueueShowsPendingEntriesAndShares) {
  const std::string admin = serve_->admin_token();
  auto queue = Golden("queue-admin", admin, {"queue"});
  EXPECT_EQ(queue.exit_code, 0) << queue.err;
  EXPECT_NE(queue.out.find(a_pending_), std::string::npos);
  Golden("queue-admin-wide", admin, {"queue", "-o", "wide"});
  Golden("queue-admin-json", admin, {"queue", "-o", "json"});
  auto own = Golden("queue-tenant", team_a_, {"queue"});
  EXPECT_NE(own.out.find(a_pending_), std::string::npos);
  // Another tenancy's entries are not listed.
  auto other = Golden("queue-other-tenant", team_b_, {"queue"});
  EXPECT_EQ(other.exit_code, 0) << other.err;
  EXPECT_EQ(other.out.find(a_pending_), std::string::npos);
  Golden("queue-other-tenant-json", team_b_, {"queue", "-o", "json"});
}

TEST_F(ReadVerbs, UsageOfTheTokensTenancy) {
  auto usage = Golden("usage-tenant", team_a_, {"usage"});
  EXPECT_EQ(usage.exit_code, 0) << usage.err;
  EXPECT_NE(usage.out.find(a_ended_), std::string::npos);
  EXPECT_NE(usage.out.find("TOTAL"), std::string::npos);
  Golden("usage-tenant-json", team_a_, {"usage", "-o", "json"});
  Golden("usage-tenant-csv", team_a_, {"usage", "-o", "csv"});
  // The hour before and the hour of the run: two buckets.
  auto series =
      Golden("usage-tenant-series", team_b_,
             {"usage", "--since", HourFromNow(-1), "--until", HourFromNow(1), "--step", "1h"});
  EXPECT_EQ(series.exit_code, 0) << series.err;
  // The admin sees several tenancies, so it names one.
  const std::string admin = serve_->admin_token();
  EXPECT_EQ(Golden("usage-admin-unnamed", admin, {"usage"}).exit_code, 5);
  auto named = Golden("usage-admin-named", admin, {"usage", "--tenancy", "team-b"});
  EXPECT_NE(named.out.find(b_ended_), std::string::npos);
  // Another tenancy's usage is not the tenant's to read.
  EXPECT_NE(Golden("usage-tenant-other", team_a_, {"usage", "--tenancy", "team-b"}).exit_code, 0);
  EXPECT_EQ(Golden("usage-bad-since", team_a_, {"usage", "--since", "yesterday"}).exit_code, 2);
}

}  // namespace
}  // namespace tessera::testing

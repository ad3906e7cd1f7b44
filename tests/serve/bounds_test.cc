// The retention plan for finished container records and the size estimate that bounds a listing
// page: pure logic over records.
#include "serve/bounds.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace tessera::serve {
namespace {

using fleet::ContainerRecord;
using fleet::ContainerState;

ContainerRecord Record(std::string id, std::string tenancy, std::string uid, ContainerState state,
                       int64_t finished_ms) {
  ContainerRecord c;
  c.id = std::move(id);
  c.spec.tenancy = std::move(tenancy);
  c.tenancy_uid = std::move(uid);
  c.state = state;
  c.created_ms = finished_ms - 10;
  c.finished_ms = fleet::IsTerminal(state) ? finished_ms : 0;
  return c;
}

std::vector<std::string> Dropped(const std::vector<ContainerRecord>& records,
                                 const RetentionOptions& options, int64_t now_ms,
                                 const std::string& pinned = "") {
  std::vector<const ContainerRecord*> view;
  for (const auto& record : records)
    view.push_back(&record);
  std::vector<std::string> out;
  for (size_t i : PlanRetention(view, options, now_ms,
                                [&](const ContainerRecord& c) { return c.id == pinned; }))
    out.push_back(records[i].id);
  return out;
}

TEST(Retention, DropsFinishedRecordsOlderThanTheAgeOnly) {
  RetentionOptions options;
  options.max_age = std::chrono::milliseconds(1000);
  const std::vector<ContainerRecord> records = {
      Record("c-1", "a", "u1", ContainerState::kExited, 100),
      Record("c-2", "a", "u1", ContainerState::kFailed, 500),
      Record("c-3", "a", "u1", ContainerState::kRunning, 100),
      Record("c-4", "a", "u1", ContainerState::kPending, 100),
      Record("c-5", "a", "u1", ContainerState::kExited, 1900),
  };
  EXPECT_EQ(Dropped(records, options, 2000), (std::vector<std::string>{"c-1", "c-2"}));
  EXPECT_EQ(Dropped(records, options, 2000, "c-2"), (std::vector<std::string>{"c-1"}));
  EXPECT_TRUE(Dropped(records, options, 1100).empty());
}

TEST(Retention, KeepsTheNewestFinishedRecordsOfEachIncarnation) {
  RetentionOptions options;
  options.per_tenancy = 2;
  const std::vector<ContainerRecord> records = {
      Record("c-1", "a", "u1", ContainerState::kExited, 10),
      Record("c-2", "a", "u1", ContainerState::kExited, 20),
      Record("c-3", "b", "u2", ContainerState::kExited, 30),
      Record("c-4", "a", "u1", ContainerState::kRunning, 0),
      Record("c-5", "a", "u1", ContainerState::kExited, 50),
      Record("c-6", "a", "u1", ContainerState::kFailed, 60),
      // The same name's earlier owner is counted apart.
      Record("c-7", "a", "", ContainerState::kExited, 70),
  };
  EXPECT_EQ(Dropped(records, options, 100), (std::vector<std::string>{"c-1", "c-2"}));
}

TEST(Retention, ParsesDurationsWithAUnit) {
  EXPECT_EQ(ParseDuration("250ms")->count(), 250);
  EXPECT_EQ(ParseDuration("30s")->count(), 30000);
  EXPECT_EQ(ParseDuration("15m")->count(), 900000);
  EXPECT_EQ(ParseDuration("168h")->count(), 168LL * 3600 * 1000);
  EXPECT_EQ(ParseDuration("7d")->count(), 7LL * 24 * 3600 * 1000);
  for (const char* bad : {"", "h", "10", "10x", "-1s", "1.5h", "99999999999999999999d"})
    EXPECT_FALSE(ParseDuration(bad).ok()) << bad;
  auto long_text = ParseDuration(std::string(1000, '9') + "y");
  ASSERT_FALSE(long_text.ok());
  EXPECT_LT(long_text.error().message.size(), 200u);
}

TEST(PageSize, TheEstimateIsNeverBelowTheRenderedJson) {
  ContainerRecord c = Record("c-0123456789abcdef", "team-a", "u", ContainerState::kExited, 5);
  c.spec.image = "registry.example/ns/image:tag";
  c.spec.command = {"sh", "-c", "echo \"hi\"\n"};
  c.spec.env = {{"PLAIN", std::string(30000, 'x')},
                {"CONTROL", std::string(100, '\x01')},
                {"QUOTES", std::string(100, '"')},
                {"UTF8", "\xc3\xa9t\xc3\xa9"},
                {"INVALID", std::string(50, '\xff')}};
  c.gpus = {"0000:18:00.0"};
  c.reason = "stopped by request";
  c.idempotency_key = "key";
  c.exit_code = 137;
  // As the api module renders a container (its every field), invalid UTF-8 replaced.
  nlohmann::json doc = {{"id", c.id},
                        {"tenancy", c.spec.tenancy},
                        {"image", c.spec.image},
                        {"command", c.spec.command},
                        {"env", c.spec.env},
                        {"isolation", "gvisor"},
                        {"gpus_requested", 8},
                        {"gpus", c.gpus},
                        {"state", "exited"},
                        {"exit_code", *c.exit_code},
                        {"reason", c.reason},
                        {"stop_requested", false},
                        {"created_ms", 1732390000000},
                        {"started_ms", 1732390000000},
                        {"finished_ms", 1732390000000},
                        {"idempotency_key", c.idempotency_key},
                        {"network", "tenancy"},
                        {"volumes", nlohmann::json::array()}};
  const size_t rendered = doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).size();
  EXPECT_GE(EstimatedJsonBytes(c), rendered);
  EXPECT_LT(EstimatedJsonBytes(c), rendered + 2048);
}

}  // namespace
}  // namespace tessera::serve

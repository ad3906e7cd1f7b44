// The simulator with tenancies: FIFO is the plain queue exactly, runs are deterministic, and a
// small tenancy is not held behind a flood under fair scheduling.
#include <nlohmann/json.hpp>

#include "scheduling_fixture.h"

namespace tessera::scheduling {
namespace {

using namespace testing;

std::vector<placement::Request> FloodTrace(uint64_t seed, int requests) {
  placement::SyntheticOptions base;
  base.seed = seed;
  base.total_gpus = 160;
  base.requests = requests;
  auto trace = SyntheticTenantTrace(base, {{"flood", 1.5}, {"a", 0.1}, {"b", 0.1}});
  EXPECT_TRUE(trace.ok());
  return *trace;
}

QueueSimulationResult Simulated(const std::vector<placement::Request>& trace, Mode mode) {
  QueueSimulationOptions options;
  options.scheduler.mode = mode;
  auto result = SimulateQueue(HgxFleet(20), trace, options);
  EXPECT_TRUE(result.ok()) << result.error().message;
  return result.ok() ? *result : QueueSimulationResult{};
}

TEST(QueueSimulator, FifoIsThePlainQueueExactly) {
  const auto trace = FloodTrace(3, 3000);
  placement::SimulationOptions plain;
  plain.queue = true;
  auto expected = placement::Simulate(HgxFleet(20), trace, plain);
  ASSERT_TRUE(expected.ok());
  QueueSimulationResult fifo = Simulated(trace, Mode::kFifo);
  EXPECT_EQ(placement::SimulationToJson(fifo.base, false),
            placement::SimulationToJson(*expected, false));
  EXPECT_EQ(fifo.scheduling, "fifo");
}

TEST(QueueSimulator, SameSeedSameJson) {
  for (Mode mode : {Mode::kFifo, Mode::kFair}) {
    const std::string first = QueueSimulationToJson(Simulated(FloodTrace(7, 3000), mode), false);
    const std::string second = QueueSimulationToJson(Simulated(FloodTrace(7, 3000), mode), false);
    EXPECT_EQ(first, second);
    EXPECT_NE(first, QueueSimulationToJson(Simulated(FloodTrace(8, 3000), mode), false));
    auto json = nlohmann::json::parse(first);
    for (const char* tenancy : {"flood", "a", "b"}) {
      const auto& t = json["per_tenancy"][tenancy];
      for (const char* field : {"requests", "admitted", "gpu_hours", "share", "wait_p50_s",
                                "wait_p95_s", "wait_max_s"}) {
        EXPECT_TRUE(t.contains(field)) << tenancy << "." << field;
      }
    }
    EXPECT_TRUE(json.contains("wait_p95_s_by_size"));
    EXPECT_TRUE(json.contains("jain_fairness"));
    EXPECT_TRUE(json.contains("gpu_utilization"));
  }
}

TEST(QueueSimulator, FairServesTheSmallTenanciesAheadOfTheFlood) {
  const auto trace = FloodTrace(5, 4000);
  QueueSimulationResult fifo = Simulated(trace, Mode::kFifo);
  QueueSimulationResult fair = Simulated(trace, Mode::kFair);
  EXPECT_EQ(fair.base.admitted, fair.base.requests);
  for (const char* tenancy : {"a", "b"}) {
    SCOPED_TRACE(tenancy);
    const TenancyStats& slow = fifo.per_tenancy.at(tenancy);
    const TenancyStats& fast = fair.per_tenancy.at(tenancy);
    EXPECT_EQ(slow.requests, fast.requests);
    EXPECT_GT(slow.wait_p95_s, 0);
    EXPECT_LT(fast.wait_p95_s, slow.wait_p95_s / 10);
    EXPECT_LT(fast.wait_p95_s_by_size.at(8), slow.wait_p95_s_by_size.at(8) / 10);
  }
  // Under FIFO everyone waits behind the flood, so all three stay backlogged; under fair only
  // the flood does.
  EXPECT_EQ(fifo.backlogged.size(), 3u);
  EXPECT_EQ(fair.backlogged, std::vector<std::string>{"flood"});
}

TEST(QueueSimulator, AGpuQuotaCapsATenancy) {
  QueueSimulationOptions options;
  options.scheduler.mode = Mode::kFair;
  options.tenancies["flood"].quota_gpus = 40;
  const auto trace = FloodTrace(5, 2000);
  auto capped = SimulateQueue(HgxFleet(20), trace, options);
  ASSERT_TRUE(capped.ok());
  // 40 of 160 GPUs at most: its GPU-hours fit in 40 GPUs over the whole run.
  const auto& flood = capped->per_tenancy.at("flood");
  EXPECT_EQ(flood.admitted, flood.requests);
  double last_end = 0;
  for (const auto& r : trace)
    last_end = std::max(last_end, r.arrival_s + r.duration_s);
  EXPECT_GT(flood.wait_p50_s, Simulated(trace, Mode::kFair).per_tenancy.at("flood").wait_p50_s);
}

TEST(QueueSimulator, SyntheticTenantsSplitRequestsByLoad) {
  const auto trace = FloodTrace(1, 1700);
  std::map<std::string, int> counts;
  for (const auto& r : trace)
    ++counts[r.tenancy];
  EXPECT_EQ(counts["flood"], 1500);
  EXPECT_EQ(counts["a"], 100);
  EXPECT_EQ(counts["b"], 100);
  EXPECT_TRUE(std::is_sorted(trace.begin(), trace.end(), [](const auto& x, const auto& y) {
    return x.arrival_s < y.arrival_s;
  }));
}

TEST(Jain, EqualValuesGiveOneAndOneTakingAllGivesOneOverN) {
  EXPECT_DOUBLE_EQ(JainIndex({1, 1, 1}), 1);
  EXPECT_DOUBLE_EQ(JainIndex({1, 0, 0, 0}), 0.25);
  EXPECT_NEAR(JainIndex({0.8, 0.1, 0.1}), 1.0 / (3 * 0.66), 1e-9);
}

}  // namespace
}  // namespace tessera::scheduling

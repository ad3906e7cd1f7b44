// Preemption choice: which running preemptible requests to stop so a reserved request can start.
#include <algorithm>

#include "scheduling_fixture.h"

namespace tessera::scheduling {
namespace {

using namespace testing;

// One HGX node full of four 2-GPU requests of `flood`, in partitions P3 {1,3}, P4 {2,4},
// P5 {5,7}, P6 {6,8}, started at t = 0, 10, 20, 30.
struct FullNode {
  placement::Fleet fleet = HgxFleet(1);
  Scheduler scheduler;

  FullNode(bool all_preemptible, bool p5_preemptible = true)
      : scheduler(MakeScheduler({.preemption = true})) {
    const placement::GpuMask masks[] = {0x05, 0x0A, 0x50, 0xA0};
    for (int i = 0; i < 4; ++i) {
      const bool preemptible = i == 2 ? p5_preemptible : all_preemptible;
      StartRunning(scheduler, fleet, 100 + i, "flood", 0, masks[i], 10.0 * i, kUnknownTime,
                   preemptible);
    }
  }
};

std::vector<RequestId> Sorted(std::vector<RequestId> ids) {
  std::sort(ids.begin(), ids.end());
  return ids;
}

struct PreemptionRow {
  const char* name;
  bool all_preemptible;
  bool p5_preemptible;
  const char* tenancy;  // of the 4-GPU request
  int priority;
  std::vector<RequestId> victims;  // empty: no preemption
};

TEST(Preemption, ChoosesTheFewestGpusThenTheLeastLostWork) {
  const PreemptionRow rows[] = {
      // Halves {1..4} lose 2*40 + 2*30 GPU-s of work, {5..8} 2*20 + 2*10: the second.
      {"under-share tenancy takes the younger half", true, true, "b", 0, {102, 103}},
      {"a non-preemptible request keeps its half", true, false, "b", 0, {100, 101}},
      {"nothing preemptible", false, false, "b", 0, {}},
      {"same tenancy, same priority: never", true, true, "flood", 0, {}},
      {"same tenancy, higher priority", true, true, "flood", 5, {102, 103}},
  };
  for (const PreemptionRow& row : rows) {
    SCOPED_TRACE(row.name);
    FullNode node(row.all_preemptible, row.p5_preemptible);
    ASSERT_TRUE(node.scheduler.SetTenancy(row.tenancy, {.max_priority = 5}).ok());
    ASSERT_TRUE(
        node.scheduler.Enqueue(Request(1, row.tenancy, 4, 40, kUnknownTime, row.priority)).ok());
    PassResult pass = node.scheduler.Schedule(node.fleet, 40);
    ASSERT_EQ(pass.reservations.size(), 1u);
    if (row.victims.empty()) {
      EXPECT_TRUE(pass.preemptions.empty());
      continue;
    }
    ASSERT_EQ(pass.preemptions.size(), 1u);
    EXPECT_EQ(pass.preemptions[0].for_request, 1u);
    EXPECT_EQ(Sorted(pass.preemptions[0].victims), row.victims);
  }
}

TEST(Preemption, OffByDefault) {
  placement::Fleet fleet = HgxFleet(1);
  Scheduler scheduler = MakeScheduler();
  StartRunning(scheduler, fleet, 100, "flood", 0, 0xFF, 0, kUnknownTime, /*preemptible=*/true);
  ASSERT_TRUE(scheduler.Enqueue(Request(1, "b", 8)).ok());
  EXPECT_TRUE(scheduler.Schedule(fleet, 1).preemptions.empty());
}

TEST(Preemption, AVictimServesOneRequestOnly) {
  placement::Fleet fleet = HgxFleet(1);
  Scheduler scheduler = MakeScheduler({.max_reservations = 2, .preemption = true});
  StartRunning(scheduler, fleet, 100, "flood", 0, 0xFF, 0, kUnknownTime, /*preemptible=*/true);
  ASSERT_TRUE(scheduler.Enqueue(Request(1, "b", 4, 1)).ok());
  ASSERT_TRUE(scheduler.Enqueue(Request(2, "c", 4, 2)).ok());
  PassResult pass = scheduler.Schedule(fleet, 5);
  ASSERT_EQ(pass.reservations.size(), 2u);
  ASSERT_EQ(pass.preemptions.size(), 1u);
  EXPECT_EQ(pass.preemptions[0].for_request, 1u);
  EXPECT_EQ(pass.preemptions[0].victims, std::vector<RequestId>{100});
}

}  // namespace
}  // namespace tessera::scheduling

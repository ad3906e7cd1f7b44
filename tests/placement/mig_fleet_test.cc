#include "placement/mig_fleet.h"

#include <gtest/gtest.h>

#include "placement/mig_fleet_state.h"

namespace tessera::placement {
namespace {

MigTraceRequest Mig(double arrival, const char* profile, double duration) {
  MigTraceRequest r;
  r.arrival_s = arrival;
  r.tenancy = "t";
  r.kind = MigRequestKind::kMig;
  r.profile = profile;
  r.duration_s = duration;
  return r;
}

MigTraceRequest Whole(double arrival, int gpus, double duration) {
  MigTraceRequest r;
  r.arrival_s = arrival;
  r.tenancy = "t";
  r.gpus = gpus;
  r.duration_s = duration;
  return r;
}

FleetSplit AllNodes(const char* layout_name, int nodes) {
  for (const StaticLayout& layout : StaticLayoutFamily())
    if (layout.name == layout_name) return FleetSplit{{{layout, nodes}}};
  ADD_FAILURE() << "no layout " << layout_name;
  return {};
}

MigSimOptions Fleet(int nodes, MigPolicy policy, double horizon) {
  MigSimOptions options;
  options.nodes = nodes;
  options.policy = policy;
  options.horizon_s = horizon;
  return options;
}

TEST(MigFleetLayouts, EveryLayoutOfTheFamilyFitsOneH100) {
  for (const StaticLayout& layout : StaticLayoutFamily()) {
    auto instances = LayoutInstances(layout, mig::BuiltinH100Table());
    ASSERT_TRUE(instances.ok()) << instances.error().message;
    EXPECT_EQ(instances->size(), layout.profiles.size()) << layout.name;
  }
  StaticLayout too_much{"too-much", {"4g.40gb", "4g.40gb"}};
  EXPECT_FALSE(LayoutInstances(too_much, mig::BuiltinH100Table()).ok());
}

TEST(MigFleetSim, OnlySevenSliceRequestsGiveTheSameGpuHoursEitherWay) {
  std::vector<MigTraceRequest> trace;
  for (int i = 0; i < 200; ++i)
    trace.push_back(Mig(i * 30.0, "7g.80gb", 600 + (i % 7) * 100));
  auto demand = SimulateMigFleet(trace, Fleet(2, MigPolicy::kByDemand, 7200));
  MigSimOptions fixed = Fleet(2, MigPolicy::kStatic, 7200);
  fixed.split = AllNodes("all-7g.80gb", 2);
  auto all_7g = SimulateMigFleet(trace, fixed);
  auto best = SearchStaticLayouts(trace, Fleet(2, MigPolicy::kStatic, 7200));
  ASSERT_TRUE(demand.ok() && all_7g.ok() && best.ok());
  EXPECT_GT(demand->gpu_hours, 10);
  EXPECT_NEAR(demand->gpu_hours, all_7g->gpu_hours, 1e-6);
  EXPECT_NEAR(demand->gpu_hours, best->result.gpu_hours, 1e-6);
  EXPECT_EQ(demand->started, all_7g->started);
  // By demand: 16 instances made once, then handed out again when idle.
  EXPECT_EQ(demand->instances_created, 16);
  EXPECT_EQ(demand->instances_destroyed, 0);
}

TEST(MigFleetSim, DemandShiftingFromOneSliceToThreeFavoursShapingByDemand) {
  std::vector<MigTraceRequest> trace;
  for (int i = 0; i < 400; ++i)
    trace.push_back(Mig(i * 9.0, "1g.10gb", 900));
  for (int i = 0; i < 400; ++i)
    trace.push_back(Mig(3600 + i * 9.0, "3g.40gb", 900));
  auto demand = SimulateMigFleet(trace, Fleet(2, MigPolicy::kByDemand, 7200));
  MigSimOptions fixed = Fleet(2, MigPolicy::kStatic, 7200);
  fixed.split = AllNodes("all-1g.10gb", 2);
  auto all_1g = SimulateMigFleet(trace, fixed);
  ASSERT_TRUE(demand.ok() && all_1g.ok());
  EXPECT_EQ(all_1g->never_placeable, 400);  // no 3g instance in the layout
  EXPECT_EQ(all_1g->started + all_1g->waiting_at_end + all_1g->never_placeable, 800);
  EXPECT_GT(demand->gpu_hours, all_1g->gpu_hours * 1.5);
  EXPECT_EQ(demand->never_placeable, 0);
  EXPECT_GT(demand->instances_destroyed, 0);  // idle 1g instances made way for 3g ones
  EXPECT_GT(demand->reconfigurations_per_hour, 0);
}

TEST(MigFleetSim, WholeRequestTakesGpusWhoseInstancesAreAllIdle) {
  std::vector<MigTraceRequest> trace;
  for (int i = 0; i < 8; ++i)
    trace.push_back(Mig(0, "1g.10gb", 10));
  trace.push_back(Whole(20, 8, 100));
  auto result = SimulateMigFleet(trace, Fleet(1, MigPolicy::kByDemand, 200));
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->started, 9);
  EXPECT_EQ(result->instances_created, 8);  // 7 on one GPU, 1 on another
  EXPECT_EQ(result->instances_destroyed, 8);
  EXPECT_EQ(result->mode_changes, 4);  // two GPUs into MIG mode and out again
  EXPECT_DOUBLE_EQ(result->wait_p95_s, 0);
  EXPECT_NEAR(result->gpu_hours, (8 * 10.0 / 7 + 8 * 100.0) / 3600, 1e-9);
}

TEST(MigFleetSim, ReservationLetsALargeRequestThroughASteadyStreamOfSmallOnes) {
  MigSimOptions options = Fleet(1, MigPolicy::kByDemand, 3000);
  options.gpus_per_node = 1;
  std::vector<MigTraceRequest> trace;
  for (int i = 0; i < 150; ++i)
    trace.push_back(Mig(i * 20.0, "1g.10gb", 100));
  trace.push_back(Mig(50, "7g.80gb", 10));
  auto result = SimulateMigFleet(trace, options);
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->waiting_at_end, 0);
  EXPECT_EQ(result->started, 151);
}

TEST(MigFleetSim, AWholeRequestHoldsANodeUntilItsSlicesDrain) {
  MigSimOptions options = Fleet(1, MigPolicy::kByDemand, 3000);
  options.gpus_per_node = 2;
  std::vector<MigTraceRequest> trace;
  for (int i = 0; i < 100; ++i)
    trace.push_back(Mig(i * 30.0, "1g.10gb", 100));
  trace.push_back(Whole(45, 2, 10));
  auto result = SimulateMigFleet(trace, options);
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->waiting_at_end, 0);
  EXPECT_EQ(result->started, 101);
  EXPECT_GT(result->mode_changes, 1);
}

TEST(MigFleetSim, SharesPackByMemoryAndCompute) {
  MigSimOptions options = Fleet(1, MigPolicy::kByDemand, 1800);
  options.gpus_per_node = 1;
  std::vector<MigTraceRequest> trace;
  for (int i = 0; i < 5; ++i) {
    MigTraceRequest share = Whole(0, 1, 3600);
    share.kind = MigRequestKind::kShare;
    share.share_memory_gib = 20;
    share.share_compute = 0.25;
    trace.push_back(share);
  }
  auto result = SimulateMigFleet(trace, options);
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->started, 4);  // 4 x 20 GiB fill 80 GiB
  EXPECT_EQ(result->waiting_at_end, 1);
  EXPECT_NEAR(result->gpu_hours, 4 * 0.25 * 0.5, 1e-9);  // half an hour to the horizon
}

TEST(MigFleetSim, RejectsASplitThatDoesNotCoverTheFleet) {
  MigSimOptions options = Fleet(4, MigPolicy::kStatic, 100);
  options.split = AllNodes("whole", 3);
  auto result = SimulateMigFleet({Whole(0, 1, 10)}, options);
  ASSERT_FALSE(result.ok());
  options.split = AllNodes("whole", 5);
  EXPECT_FALSE(SimulateMigFleet({Whole(0, 1, 10)}, options).ok());
  options.nodes = 0;
  EXPECT_FALSE(SimulateMigFleet({}, options).ok());
}

}  // namespace
}  // namespace tessera::placement

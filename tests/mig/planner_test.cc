// Planning MIG changes: what stays, what goes, where new instances land.
#include <gtest/gtest.h>

#include "mig/mig.h"

namespace tessera::mig {
namespace {

LayoutEntry Want(std::vector<std::pair<std::string, uint32_t>> devices) {
  LayoutEntry entry;
  entry.devices.all = true;
  entry.mig_enabled = true;
  entry.mig_devices = std::move(devices);
  return entry;
}

Instance Gi(uint32_t id, uint32_t profile, uint32_t start, uint32_t size) {
  return Instance{id, profile, {start, size}, 1, true};
}

std::string Creations(const GpuPlan& plan) {
  std::string out;
  for (const auto& c : plan.create)
    out += c.profile + "@" + std::to_string(c.placement.start) + " ";
  return out;
}

TEST(MigPlanner, EnablesMigAndPlacesSevenOneSliceInstancesOnAFreshH100) {
  GpuState state{"0000:18:00.0", false, false, {}};
  auto plan = PlanGpu(state, Want({{"1g.10gb", 7}}), BuiltinH100Table());
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_EQ(plan->set_mig_mode, true);
  EXPECT_TRUE(plan->destroy.empty());
  EXPECT_EQ(Creations(*plan),
            "1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 1g.10gb@4 1g.10gb@5 1g.10gb@6 ");
  for (const auto& c : plan->create)
    EXPECT_EQ(c.profile_id, 19u);
}

TEST(MigPlanner, ALayoutInPlaceChangesNothing) {
  GpuState state{"0000:18:00.0", true, true, {Gi(1, 9, 0, 4), Gi(5, 14, 4, 2), Gi(13, 19, 6, 1)}};
  auto plan =
      PlanGpu(state, Want({{"1g.10gb", 1}, {"2g.20gb", 1}, {"3g.40gb", 1}}), BuiltinH100Table());
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_TRUE(plan->empty());
  EXPECT_EQ(DescribePlan(*plan, BuiltinH100Table()).front(),
            "no change (H100 80GB layout in place)");
}

TEST(MigPlanner, KeepsWhatFitsDestroysTheRestAndPlacesTheNewOnesAround) {
  // 3g.40gb at 0 stays; 2g.20gb at 4 and 1g.10gb at 6 make way for two 1g.20gb.
  GpuState state{"0000:18:00.0", true, true, {Gi(1, 9, 0, 4), Gi(5, 14, 4, 2), Gi(13, 19, 6, 1)}};
  auto plan = PlanGpu(state, Want({{"3g.40gb", 1}, {"1g.20gb", 2}}), BuiltinH100Table());
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_FALSE(plan->set_mig_mode);
  EXPECT_EQ(plan->destroy, (std::vector<uint32_t>{5, 13}));
  EXPECT_EQ(Creations(*plan), "1g.20gb@4 1g.20gb@6 ");
}

TEST(MigPlanner, ReplacesEverythingWhenKeptInstancesBlockTheFit) {
  // A 1g.10gb at slice 0 blocks the only placement of 4g.40gb.
  GpuState state{"0000:18:00.0", true, true, {Gi(7, 19, 0, 1)}};
  auto plan = PlanGpu(state, Want({{"4g.40gb", 1}, {"1g.10gb", 1}}), BuiltinH100Table());
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_EQ(plan->destroy, (std::vector<uint32_t>{7}));
  EXPECT_EQ(Creations(*plan), "4g.40gb@0 1g.10gb@4 ");
}

TEST(MigPlanner, AnInstanceSplitIntoSeveralComputeInstancesIsNotKept) {
  Instance split = Gi(1, 9, 0, 4);
  split.compute_instances = 3;
  split.whole = false;
  GpuState state{"0000:18:00.0", true, true, {split}};
  auto plan = PlanGpu(state, Want({{"3g.40gb", 1}}), BuiltinH100Table());
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->destroy, (std::vector<uint32_t>{1}));
  EXPECT_EQ(Creations(*plan), "3g.40gb@0 ");
}

TEST(MigPlanner, MigOffDestroysInstancesThenDisablesTheMode) {
  GpuState state{"0000:18:00.0", true, true, {Gi(7, 19, 0, 1), Gi(8, 19, 1, 1)}};
  LayoutEntry off;
  off.devices.all = true;
  auto plan = PlanGpu(state, off, BuiltinH100Table());
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->set_mig_mode, false);
  EXPECT_EQ(plan->destroy, (std::vector<uint32_t>{7, 8}));
  GpuState already_off{"0000:18:00.0", false, false, {}};
  EXPECT_TRUE(PlanGpu(already_off, off, BuiltinH100Table())->empty());
}

TEST(MigPlanner, RefusesLayoutsTheBoardCannotHold) {
  GpuState state{"0000:18:00.0", false, false, {}};
  auto unknown = PlanGpu(state, Want({{"1g.5gb", 1}}), BuiltinH100Table());
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message.find("not offered by H100 80GB"), std::string::npos);
  auto too_many = PlanGpu(state, Want({{"1g.10gb", 8}}), BuiltinH100Table());
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.error().message.find("at most 7"), std::string::npos);
  auto two_me = PlanGpu(state, Want({{"1g.10gb+me", 2}}), BuiltinH100Table());
  EXPECT_FALSE(two_me.ok());
  auto over =
      PlanGpu(state, Want({{"4g.40gb", 1}, {"3g.40gb", 1}, {"1g.10gb", 1}}), BuiltinH100Table());
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.error().message.find("compute"), std::string::npos) << over.error().message;
  // 2 × 3g.40gb and a 2g.20gb need 8 compute slices.
  auto no_fit = PlanGpu(state, Want({{"3g.40gb", 2}, {"2g.20gb", 1}}), BuiltinH100Table());
  EXPECT_FALSE(no_fit.ok());
}

}  // namespace
}  // namespace tessera::mig

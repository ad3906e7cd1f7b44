#include <gtest/gtest.h>

#include "topology/topology.h"

namespace tessera::topology {
namespace {

ActivationState Fresh() {
  auto planner = PartitionPlanner::Create(HgxH100Table());
  EXPECT_TRUE(planner.ok());
  return ActivationState(*planner);
}

TEST(Activation, DisjointPartitionsCanBeActiveTogether) {
  ActivationState state = Fresh();
  ASSERT_TRUE(state.Activate(3).ok());  // {1,3}
  ASSERT_TRUE(state.Activate(4).ok());  // {2,4}
  ASSERT_TRUE(state.Activate(2).ok());  // {5,6,7,8}
  EXPECT_EQ(state.Active(), (std::vector<uint32_t>{2, 3, 4}));
  EXPECT_EQ(state.busy_modules(), 0xffu);
}

TEST(Activation, OverlapWithAnActivePartitionIsRefusedAndNamed) {
  ActivationState state = Fresh();
  ASSERT_TRUE(state.Activate(3).ok());  // {1,3}
  auto refused = state.Activate(1);     // {1,2,3,4}
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().category, ErrorCategory::kFailedPrecondition);
  EXPECT_EQ(refused.error().message,
            "partition 1 {1,2,3,4} overlaps active partition 3 {1,3} on modules {1,3}");
  EXPECT_FALSE(state.Activate(0).ok());  // whole board
  EXPECT_FALSE(state.Activate(7).ok());  // {1}
  EXPECT_FALSE(state.Activate(9).ok());  // {3}
  EXPECT_TRUE(state.Activate(8).ok());   // {2}
  EXPECT_EQ(state.Active(), (std::vector<uint32_t>{3, 8}));
}

TEST(Activation, WholeBoardBlocksEverythingUntilDeactivated) {
  ActivationState state = Fresh();
  ASSERT_TRUE(state.Activate(0).ok());
  for (uint32_t id = 1; id <= 14; ++id)
    EXPECT_FALSE(state.Activate(id).ok()) << id;
  ASSERT_TRUE(state.Deactivate(0).ok());
  EXPECT_EQ(state.busy_modules(), 0u);
  EXPECT_TRUE(state.Activate(14).ok());  // {8}
}

TEST(Activation, ActivatingTwiceAndDeactivatingAnInactivePartitionAreRefused) {
  ActivationState state = Fresh();
  ASSERT_TRUE(state.Activate(5).ok());
  auto again = state.Activate(5);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.error().message.find("already active"), std::string::npos);
  auto inactive = state.Deactivate(6);
  ASSERT_FALSE(inactive.ok());
  EXPECT_EQ(inactive.error().category, ErrorCategory::kFailedPrecondition);
  auto unknown = state.Activate(42);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().category, ErrorCategory::kNotFound);
}

TEST(Activation, SetActiveIsAllOrNothing) {
  ActivationState state = Fresh();
  ASSERT_TRUE(state.SetActive({1, 5}).ok());
  EXPECT_EQ(state.Active(), (std::vector<uint32_t>{1, 5}));
  // {5,6,7,8} overlaps {5,7}: nothing changes.
  auto refused = state.SetActive({2, 5});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(state.Active(), (std::vector<uint32_t>{1, 5}));
  ASSERT_TRUE(state.SetActive({}).ok());
  EXPECT_TRUE(state.Active().empty());
}

TEST(Activation, ChoiceOverTheFreeModulesNeverOverlapsAnActivePartition) {
  ActivationState state = Fresh();
  ASSERT_TRUE(state.Activate(3).ok());  // {1,3}
  const PartitionPlanner& planner = state.planner();
  for (int size : {1, 2, 1, 1}) {
    auto choice = planner.Choose(planner.all_modules() & ~state.busy_modules(), size);
    ASSERT_TRUE(choice.ok()) << size;
    EXPECT_TRUE(state.Activate(choice->partition_id).ok()) << size;
  }
  // {1,3}, {2}, {5,7}, {4}, {6} are active now: no half is left whole.
  EXPECT_EQ(state.Active(), (std::vector<uint32_t>{3, 5, 8, 10, 12}));
  EXPECT_FALSE(planner.Choose(planner.all_modules() & ~state.busy_modules(), 4).ok());
}

}  // namespace
}  // namespace tessera::topology

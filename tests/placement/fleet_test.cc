#include <gtest/gtest.h>

#include "placement/placement.h"
#include "topology/gpu_masks.h"

namespace tessera::placement {
namespace {

using topology::GpuMaskOf;

std::shared_ptr<const topology::PartitionPlanner> Hgx() {
  auto planner = topology::PartitionPlanner::Create(topology::HgxH100Table());
  EXPECT_TRUE(planner.ok());
  return *planner;
}

Fleet HgxFleet(int nodes) {
  auto fleet = Fleet::Uniform(nodes, 8, Hgx());
  EXPECT_TRUE(fleet.ok()) << fleet.error().message;
  return std::move(*fleet);
}

Placement Place(Fleet& fleet, int gpus, Policy policy) {
  auto placement = fleet.Place(gpus, policy);
  EXPECT_TRUE(placement.ok()) << placement.error().message;
  return placement.ok() ? *placement : Placement{};
}

TEST(FleetPlacement, BinpackKeepsWholeNodesFree) {
  Fleet fleet = HgxFleet(3);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(Place(fleet, 1, Policy::kBinpack).node, 0);
  EXPECT_EQ(fleet.free_mask(0), GpuMaskOf({4, 5, 6, 7}));  // singles filled half {1,2,3,4} first
  EXPECT_EQ(Place(fleet, 8, Policy::kBinpack).node, 1);
  EXPECT_EQ(Place(fleet, 8, Policy::kBinpack).node, 2);
}

TEST(FleetPlacement, SpreadBreaksEveryNodeLikeLeastAllocated) {
  Fleet fleet = HgxFleet(3);
  EXPECT_EQ(Place(fleet, 1, Policy::kSpread).node, 0);
  EXPECT_EQ(Place(fleet, 1, Policy::kSpread).node, 1);
  EXPECT_EQ(Place(fleet, 1, Policy::kSpread).node, 2);
  EXPECT_EQ(Place(fleet, 1, Policy::kSpread).node, 0);
  auto eight = fleet.Place(8, Policy::kSpread);
  ASSERT_FALSE(eight.ok());
  EXPECT_EQ(eight.error().category, ErrorCategory::kNotFound);
}

TEST(FleetPlacement, FirstFitTakesTheFirstNodeAndTheFirstPartition) {
  Fleet fleet = HgxFleet(2);
  Placement a = Place(fleet, 1, Policy::kFirstFit);
  EXPECT_EQ(a.node, 0);
  EXPECT_EQ(a.partition_id, 7u);  // {1}
  Placement b = Place(fleet, 2, Policy::kFirstFit);
  EXPECT_EQ(b.partition_id, 4u);  // {2,4}: {1,3} is broken
  Placement c = Place(fleet, 4, Policy::kFirstFit);
  EXPECT_EQ(c.node, 0);
  EXPECT_EQ(c.partition_id, 2u);
}

TEST(FleetPlacement, BinpackTakesTheChoiceThatBreaksLeast) {
  Fleet fleet = HgxFleet(2);
  // Node 1 gets a single (its half {1,2,3,4} broken); node 0 stays whole.
  ASSERT_TRUE(fleet.SetState(1, 0, GpuState::kDraining).ok());
  Placement p = Place(fleet, 1, Policy::kBinpack);
  EXPECT_EQ(p.node, 1);
  EXPECT_EQ(p.gpus, GpuMaskOf({2}));  // module 3 completes the broken pair {1,3}
  Placement pair = Place(fleet, 2, Policy::kBinpack);
  EXPECT_EQ(pair.node, 1);
  EXPECT_EQ(pair.partition_id, 4u);  // {2,4}
}

TEST(FleetPlacement, BinpackTiesGoToTheFullerNode) {
  Fleet fleet = HgxFleet(2);
  ASSERT_TRUE(fleet.SetState(0, 0, GpuState::kChecking).ok());  // node 0: 7 free
  for (int gpu = 0; gpu < 4; ++gpu) {
    ASSERT_TRUE(fleet.SetState(1, gpu, GpuState::kQuarantined).ok());  // node 1: 4 free
  }
  // A 4-GPU request breaks the same on both ({5,6,7,8}); node 1 is fuller.
  EXPECT_EQ(Place(fleet, 4, Policy::kBinpack).node, 1);
}

TEST(FleetPlacement, SizesNoPartitionHasAreRefusedWithTheReason) {
  Fleet fleet = HgxFleet(2);
  for (int size : {3, 5, 6, 7, 9}) {
    auto placement = fleet.Place(size, Policy::kBinpack);
    ASSERT_FALSE(placement.ok()) << size;
    EXPECT_EQ(placement.error().category, ErrorCategory::kFailedPrecondition);
    EXPECT_NE(placement.error().message.find("sizes this fleet can give: 1, 2, 4, 8"),
              std::string::npos)
        << placement.error().message;
  }
  auto plain = Fleet::Uniform(2, 8, nullptr);
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(plain->Place(3, Policy::kBinpack).ok());
}

TEST(FleetPlacement, OnlyFreeGpusAreGiven) {
  Fleet fleet = HgxFleet(1);
  ASSERT_TRUE(fleet.SetState(0, 5, GpuState::kQuarantined).ok());
  EXPECT_FALSE(fleet.Place(8, Policy::kBinpack).ok());
  Placement half = Place(fleet, 4, Policy::kBinpack);
  EXPECT_EQ(half.gpus, GpuMaskOf({0, 1, 2, 3}));
  EXPECT_EQ(fleet.state(0, 2), GpuState::kLeased);
  EXPECT_FALSE(fleet.Place(4, Policy::kBinpack).ok());
}

TEST(FleetPlacement, ReleaseFreesLeasedGpusAndKeepsOperatorStates) {
  Fleet fleet = HgxFleet(1);
  Placement p = Place(fleet, 4, Policy::kBinpack);
  ASSERT_TRUE(fleet.SetState(0, 1, GpuState::kDraining).ok());
  ASSERT_TRUE(fleet.Release(p).ok());
  EXPECT_EQ(fleet.state(0, 0), GpuState::kFree);
  EXPECT_EQ(fleet.state(0, 1), GpuState::kDraining);
  EXPECT_EQ(fleet.free_gpus(), 7);
  auto twice = fleet.Release(Placement{0, GpuMaskOf({0}), std::nullopt});
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.error().category, ErrorCategory::kFailedPrecondition);
}

TEST(FleetPlacement, LeasingOnlyThroughPlace) {
  Fleet fleet = HgxFleet(1);
  EXPECT_FALSE(fleet.SetState(0, 0, GpuState::kLeased).ok());
  Placement p = Place(fleet, 1, Policy::kBinpack);
  EXPECT_EQ(fleet.SetState(0, topology::MaskToIndices(p.gpus)[0], GpuState::kFree).error().category,
            ErrorCategory::kFailedPrecondition);
  EXPECT_EQ(fleet.SetState(3, 0, GpuState::kFree).error().category, ErrorCategory::kNotFound);
}

TEST(FleetPlacement, NodesWithoutTableUseTheLinkScorer) {
  topology::GpuTopology box;
  for (int i = 0; i < 4; ++i) {
    box.gpus.push_back({"g" + std::to_string(i), "", i < 2 ? 0 : 1, {}});
  }
  box.nvlinks.assign(4, std::vector<int>(4, 0));
  box.nvlinks[1][3] = box.nvlinks[3][1] = 2;
  auto scorer = topology::GpuSetScorer::Create(box);
  ASSERT_TRUE(scorer.ok());
  NodeSpec node{"n0", 4, nullptr, *scorer};
  auto fleet = Fleet::Create({node});
  ASSERT_TRUE(fleet.ok());
  EXPECT_EQ(Place(*fleet, 2, Policy::kBinpack).gpus, GpuMaskOf({1, 3}));
  EXPECT_EQ(Place(*fleet, 2, Policy::kBinpack).gpus, GpuMaskOf({0, 2}));
}

TEST(FleetPlacement, BadFleetsAreRefused) {
  EXPECT_FALSE(Fleet::Uniform(2, 4, Hgx()).ok());  // table has 8 modules
  EXPECT_FALSE(Fleet::Uniform(0, 8, nullptr).ok());
  EXPECT_FALSE(Fleet::Uniform(1, 65, nullptr).ok());
}

TEST(FleetPlacement, PolicyNames) {
  for (Policy p : {Policy::kBinpack, Policy::kSpread, Policy::kFirstFit}) {
    auto parsed = ParsePolicy(PolicyName(p));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, p);
  }
  EXPECT_FALSE(ParsePolicy("random").ok());
}

}  // namespace
}  // namespace tessera::placement

namespace tessera::placement {
namespace {

TEST(FleetPlacement, ChooseNodeFollowsAnOutsideLeaseModel) {
  // Two nodes without tables, 4 and 8 GPUs, whose leases someone else keeps.
  std::vector<NodeSpec> nodes(2);
  nodes[0] = {"small", 4, nullptr, nullptr};
  nodes[1] = {"big", 8, nullptr, nullptr};
  for (bool cache : {true, false}) {
    auto created = Fleet::Create(nodes, FleetOptions{cache});
    ASSERT_TRUE(created.ok()) << created.error().message;
    Fleet fleet = std::move(*created);
    // Both whole: binpack breaks the smaller whole node, keeping the 8-GPU node whole.
    EXPECT_EQ(fleet.ChooseNode(2, Policy::kBinpack), 0);
    EXPECT_EQ(fleet.free_mask(0), GpuMaskOf({0, 1, 2, 3}));  // choosing leases nothing
    ASSERT_TRUE(fleet.SetFreeMask(0, GpuMaskOf({2, 3})).ok());
    EXPECT_EQ(fleet.state(0, 0), GpuState::kLeased);
    EXPECT_EQ(fleet.ChooseNode(2, Policy::kBinpack), 0);  // the fuller, already broken node
    EXPECT_EQ(fleet.ChooseNode(2, Policy::kSpread), 1);   // the emptier one
    EXPECT_EQ(fleet.ChooseNode(3, Policy::kBinpack), 1);  // does not fit on node 0
    ASSERT_TRUE(fleet.SetFreeMask(1, 0).ok());
    EXPECT_EQ(fleet.ChooseNode(3, Policy::kBinpack), -1);
    ASSERT_TRUE(fleet.SetFreeMask(0, GpuMaskOf({0, 1, 2, 3})).ok());
    EXPECT_EQ(fleet.state(0, 0), GpuState::kFree);
    EXPECT_FALSE(fleet.SetFreeMask(0, GpuMaskOf({4})).ok());
    EXPECT_FALSE(fleet.SetFreeMask(2, 0).ok());
  }
}

}  // namespace
}  // namespace tessera::placement

#include <gtest/gtest.h>

#include "topology/topology.h"

namespace tessera::topology {
namespace {

// Module set -> mask (bit m-1).
GpuMask Modules(std::initializer_list<int> modules) {
  GpuMask mask = 0;
  for (int m : modules)
    mask |= GpuMask{1} << (m - 1);
  return mask;
}

std::shared_ptr<const PartitionPlanner> Hgx() {
  auto planner = PartitionPlanner::Create(HgxH100Table());
  EXPECT_TRUE(planner.ok());
  return *planner;
}

uint32_t ChosenId(const PartitionPlanner& planner, GpuMask free, int size, GpuMask must = 0) {
  auto choice = planner.Choose(free, size, must);
  EXPECT_TRUE(choice.ok()) << choice.error().message;
  return choice.ok() ? choice->partition_id : 999;
}

TEST(PartitionChoice, TakesSinglesFromABrokenHalfFirst) {
  auto planner = Hgx();
  // Module 1 is in use: half {1,2,3,4} is broken, half {5,6,7,8} is intact.
  GpuMask free = Modules({2, 3, 4, 5, 6, 7, 8});
  auto choice = planner->Choose(free, 1);
  ASSERT_TRUE(choice.ok());
  EXPECT_TRUE(choice->modules & Modules({2, 3, 4})) << MaskToString(choice->modules);
  EXPECT_EQ(choice->loss.lost_by_size[4], 0);
}

TEST(PartitionChoice, CompletesABrokenPairBeforeBreakingAnIntactPair) {
  auto planner = Hgx();
  // Module 1 in use: pair {1,3} is broken, so module 3 is the single that costs least.
  EXPECT_EQ(ChosenId(*planner, Modules({2, 3, 4, 5, 6, 7, 8}), 1), 9u);  // P9 = {3}
  // Module 4 in use: pair {2,4} broken, so module 2 (P8).
  EXPECT_EQ(ChosenId(*planner, Modules({1, 2, 3, 5, 6, 7, 8}), 1), 8u);
}

TEST(PartitionChoice, TakesAPairFromABrokenHalfBeforeBreakingAnIntactHalf) {
  auto planner = Hgx();
  // {1} in use: pair {2,4} is still whole in the broken half.
  EXPECT_EQ(ChosenId(*planner, Modules({2, 3, 4, 5, 6, 7, 8}), 2), 4u);
  // {5} in use: pair {6,8} (P6) rather than breaking half {1,2,3,4}.
  EXPECT_EQ(ChosenId(*planner, Modules({1, 2, 3, 4, 6, 7, 8}), 2), 6u);
}

TEST(PartitionChoice, FullyFreeBoardGivesTheLowestPartitionOfEachSize) {
  auto planner = Hgx();
  GpuMask all = planner->all_modules();
  EXPECT_EQ(ChosenId(*planner, all, 8), 0u);
  EXPECT_EQ(ChosenId(*planner, all, 4), 1u);
  EXPECT_EQ(ChosenId(*planner, all, 2), 3u);
  EXPECT_EQ(ChosenId(*planner, all, 1), 7u);
}

TEST(PartitionChoice, LossCountsEveryPartitionTheChoiceBreaks) {
  auto planner = Hgx();
  auto choice = planner->Choose(planner->all_modules(), 1);
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->loss.lost_by_size[8], 1);
  EXPECT_EQ(choice->loss.lost_by_size[4], 1);
  EXPECT_EQ(choice->loss.lost_by_size[2], 1);
  EXPECT_EQ(choice->loss.lost_by_size[1], 1);
  EXPECT_EQ(planner->Capacity(planner->all_modules()).lost_by_size[1], 8);
}

TEST(PartitionChoice, EightGpusNeedTheWholeBoard) {
  auto planner = Hgx();
  auto choice = planner->Choose(Modules({1, 2, 3, 4, 5, 6, 7}), 8);
  ASSERT_FALSE(choice.ok());
  EXPECT_EQ(choice.error().category, ErrorCategory::kNotFound);
}

TEST(PartitionChoice, FourGpusNeedAWholeHalf) {
  auto planner = Hgx();
  // Four free GPUs, but spread over both halves: no 4-GPU partition is free.
  auto choice = planner->Choose(Modules({1, 2, 5, 6}), 4);
  ASSERT_FALSE(choice.ok());
  EXPECT_EQ(choice.error().category, ErrorCategory::kNotFound);
  EXPECT_NE(choice.error().message.find("free modules: {1,2,5,6}"), std::string::npos);
  EXPECT_EQ(ChosenId(*planner, Modules({1, 2, 5, 6, 7, 8}), 4), 2u);
}

TEST(PartitionChoice, PairsAreOnlyTheTablesPairs) {
  auto planner = Hgx();
  // {1,2} are both free but not a partition; {1,3} is not free.
  auto choice = planner->Choose(Modules({1, 2}), 2);
  ASSERT_FALSE(choice.ok());
  EXPECT_EQ(choice.error().category, ErrorCategory::kNotFound);
}

class SizesWithoutPartition : public ::testing::TestWithParam<int> {};

TEST_P(SizesWithoutPartition, AreRefusedWithTheReason) {
  auto planner = Hgx();
  auto choice = planner->Choose(planner->all_modules(), GetParam());
  ASSERT_FALSE(choice.ok());
  EXPECT_EQ(choice.error().category, ErrorCategory::kFailedPrecondition);
  EXPECT_NE(choice.error().message.find("no fabric partition of hgx-h100-8gpu has " +
                                        std::to_string(GetParam()) + " GPUs"),
            std::string::npos)
      << choice.error().message;
  EXPECT_NE(choice.error().message.find("partition sizes: 1, 2, 4, 8"), std::string::npos);
  EXPECT_EQ(planner->Best(planner->all_modules(), GetParam()), nullptr);
}

INSTANTIATE_TEST_SUITE_P(PartitionChoice, SizesWithoutPartition,
                         ::testing::Values(0, 3, 5, 6, 7, 9, 17));

TEST(PartitionChoice, MustIncludeSelectsThePartitionHoldingThoseModules) {
  auto planner = Hgx();
  GpuMask all = planner->all_modules();
  EXPECT_EQ(ChosenId(*planner, all, 2, Modules({6})), 6u);   // {6,8}
  EXPECT_EQ(ChosenId(*planner, all, 4, Modules({7})), 2u);   // {5,6,7,8}
  EXPECT_EQ(ChosenId(*planner, all, 1, Modules({4})), 10u);  // {4}
  // {1,2} are in no common pair.
  auto none = planner->Choose(all, 2, Modules({1, 2}));
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().category, ErrorCategory::kNotFound);
  // Required modules must be free.
  auto busy = planner->Choose(Modules({2, 3}), 2, Modules({1}));
  ASSERT_FALSE(busy.ok());
  EXPECT_EQ(busy.error().category, ErrorCategory::kInvalidArgument);
}

TEST(PartitionChoice, PrecomputedAnswerEqualsTheDirectSearchForEveryFreeSet) {
  auto planner = Hgx();
  for (GpuMask free = 0; free < 256; ++free) {
    for (int size : {1, 2, 4, 8}) {
      const PartitionChoice* fast = planner->Best(free, size);
      // Reference: minimum loss key over every fitting partition, lowest position on ties.
      int best = -1;
      unsigned __int128 best_key = 0;
      for (int i = 0; i < planner->partition_count(); ++i) {
        GpuMask mask = planner->partition_mask(i);
        if (MaskSize(mask) != size || (mask & ~free)) continue;
        CapacityLoss loss;
        CapacityLoss before = planner->Capacity(free), after = planner->Capacity(free & ~mask);
        for (int s = 1; s <= 8; ++s)
          loss.lost_by_size[s] = before.lost_by_size[s] - after.lost_by_size[s];
        if (best < 0 || loss.Key() < best_key) {
          best = i;
          best_key = loss.Key();
        }
      }
      if (best < 0) {
        EXPECT_EQ(fast, nullptr) << MaskToString(free) << " size " << size;
      } else {
        ASSERT_NE(fast, nullptr) << MaskToString(free) << " size " << size;
        EXPECT_EQ(fast->index, best) << MaskToString(free) << " size " << size;
        EXPECT_EQ(fast->loss_key, best_key);
      }
    }
  }
}

TEST(PartitionChoice, TiesGoToTheEarlierPartitionInTheTable) {
  auto planner = Hgx();
  // Both halves intact and equivalent: P1 before P2; with half 1 used, P2.
  EXPECT_EQ(ChosenId(*planner, planner->all_modules(), 4), 1u);
  // Modules 1 and 5 in use: every single left costs the same at sizes 8 and 4; {3} and {7}
  // complete a broken pair; {3} comes first in the table.
  EXPECT_EQ(ChosenId(*planner, Modules({2, 3, 4, 6, 7, 8}), 1), 9u);
}

TEST(PartitionChoice, FirstFitTakesTableOrder) {
  auto planner = Hgx();
  EXPECT_EQ(planner->FirstFit(planner->all_modules(), 1), 7);  // P7 = {1}
  EXPECT_EQ(planner->FirstFit(Modules({2, 3, 4, 5, 6, 7, 8}), 1), 8);
  EXPECT_EQ(planner->FirstFit(Modules({1, 2, 5, 6}), 4), -1);
}

TEST(PartitionChoice, LargeBoardsComputeTheAnswerPerCall) {
  // 16 modules: above the precomputed size, the same rule applies.
  PartitionTable table;
  table.board = "test-16gpu";
  table.module_count = 16;
  table.partitions.push_back({0, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}});
  table.partitions.push_back({1, {1, 2, 3, 4, 5, 6, 7, 8}});
  table.partitions.push_back({2, {9, 10, 11, 12, 13, 14, 15, 16}});
  for (int m = 1; m <= 16; ++m)
    table.partitions.push_back({uint32_t(2 + m), {m}});
  auto planner = PartitionPlanner::Create(table);
  ASSERT_TRUE(planner.ok());
  GpuMask free = ((GpuMask{1} << 16) - 1) & ~GpuMask{1 << 12};  // module 13 in use
  auto choice = (*planner)->Choose(free, 1);
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->partition_id, 3u + 8);  // module 9: the half that is already broken
  const PartitionChoice* best = (*planner)->Best(free, 1);
  ASSERT_NE(best, nullptr);
  EXPECT_EQ(best->partition_id, choice->partition_id);
}

}  // namespace
}  // namespace tessera::topology

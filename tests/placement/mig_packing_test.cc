#include <gtest/gtest.h>

#include "placement/placement.h"

namespace tessera::placement {
namespace {

MigSlot Slot(const char* profile, uint32_t compute, bool free = true) {
  return MigSlot{profile, compute, free};
}

// An H100 cut into seven 1g.10gb slices, `busy` of them in use.
MigParent Sevenths(int busy) {
  MigParent parent{7, true, {}};
  for (int i = 0; i < 7; ++i)
    parent.slots.push_back(Slot("1g.10gb", 1, i >= busy));
  return parent;
}

TEST(MigPacking, TheFullestParentGivesFirst) {
  std::vector<MigParent> parents = {Sevenths(0), Sevenths(5), Sevenths(2)};
  auto chosen = PackMigSlices(parents, "1g.10gb", 2);
  ASSERT_TRUE(chosen.ok()) << chosen.error().message;
  EXPECT_EQ(*chosen, (std::vector<MigChoice>{{1, 5}, {1, 6}}));
}

TEST(MigPacking, SpillsToTheNextFullestWhenOneParentHasTooFew) {
  std::vector<MigParent> parents = {Sevenths(0), Sevenths(6), Sevenths(3)};
  auto chosen = PackMigSlices(parents, "1g.10gb", 3);
  ASSERT_TRUE(chosen.ok()) << chosen.error().message;
  EXPECT_EQ(*chosen, (std::vector<MigChoice>{{1, 6}, {2, 3}, {2, 4}}));
}

TEST(MigPacking, OnlyTheAskedProfileAndOnlyPlaceableParents) {
  MigParent mixed{7, true, {Slot("3g.40gb", 3), Slot("2g.20gb", 2), Slot("1g.10gb", 1)}};
  MigParent checking = Sevenths(0);
  checking.placeable = false;  // e.g. its last tenant's check is running
  std::vector<MigParent> parents = {checking, mixed};
  auto chosen = PackMigSlices(parents, "2g.20gb", 1);
  ASSERT_TRUE(chosen.ok()) << chosen.error().message;
  EXPECT_EQ(*chosen, (std::vector<MigChoice>{{1, 1}}));

  auto none = PackMigSlices(parents, "1g.10gb", 2);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().message, "2 free MIG slice(s) wanted, 1 free");
}

TEST(MigPacking, UsedSlicesOfOtherProfilesCountTowardsFullness) {
  MigParent mixed{7, true, {Slot("3g.40gb", 3, false), Slot("1g.10gb", 1)}};
  std::vector<MigParent> parents = {Sevenths(1), mixed};
  auto chosen = PackMigSlices(parents, "1g.10gb", 1);
  ASSERT_TRUE(chosen.ok()) << chosen.error().message;
  EXPECT_EQ(*chosen, (std::vector<MigChoice>{{1, 1}}));
}

TEST(MigPacking, RefusesCountsOutsideTheBounds) {
  std::vector<MigParent> parents = {Sevenths(0)};
  EXPECT_FALSE(PackMigSlices(parents, "1g.10gb", 0).ok());
  EXPECT_FALSE(PackMigSlices(parents, "1g.10gb", kMaxMigSlicesPerRequest + 1).ok());
  EXPECT_FALSE(PackMigSlices({}, "1g.10gb", 1).ok());
}

TEST(MigPacking, FractionIsComputeSlicesOverTheBoards) {
  EXPECT_DOUBLE_EQ(MigGpuFraction(1, 7), 1.0 / 7);
  EXPECT_DOUBLE_EQ(MigGpuFraction(3, 7), 3.0 / 7);
  EXPECT_DOUBLE_EQ(MigGpuFraction(7, 7), 1.0);
  EXPECT_DOUBLE_EQ(MigGpuFraction(1, 0), 1.0);
}

TEST(MigPacking, ComputeSlicesComeFromTheProfileName) {
  EXPECT_EQ(MigProfileComputeSlices("1g.10gb"), 1u);
  EXPECT_EQ(MigProfileComputeSlices("1g.10gb+me"), 1u);
  EXPECT_EQ(MigProfileComputeSlices("3g.40gb"), 3u);
  EXPECT_EQ(MigProfileComputeSlices("7g.80gb"), 7u);
  EXPECT_EQ(MigProfileComputeSlices("1c.3g.40gb"), 1u);  // a compute instance of a 3g instance
  EXPECT_EQ(MigProfileComputeSlices("2c.4g.40gb"), 2u);
  for (const char* other : {"", "g.10gb", "1x.10gb", "10", "1g", "abc", "1g10gb"})
    EXPECT_EQ(MigProfileComputeSlices(other), 0u) << other;
  EXPECT_EQ(MigBoardComputeSlices(0x20b7), 4u);  // A30
  EXPECT_EQ(MigBoardComputeSlices(0x20b0), 7u);  // A100
  EXPECT_EQ(MigBoardComputeSlices(0x2330), 7u);  // H100 SXM
}

}  // namespace
}  // namespace tessera::placement

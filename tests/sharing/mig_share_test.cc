// Shares of a MIG slice: the profile a share names, the flag, the slice it goes to and what it
// is metered as.
#include <gtest/gtest.h>

#include "placement/placement.h"
#include "sharing/sharing.h"

namespace tessera::sharing {
namespace {

Share MigShare(uint64_t memory, int compute, std::string profile = "3g.40gb") {
  Share share;
  share.memory_bytes = memory;
  share.compute_percent = compute;
  share.mig_profile = std::move(profile);
  return share;
}

SharedSlice Slice(std::string profile, uint64_t memory, std::vector<Share> held = {},
                  std::string tenancy = "", bool placeable = true) {
  return SharedSlice{std::move(profile),
                     SharedGpu{memory, placeable, std::move(held), std::move(tenancy)}};
}

TEST(MigShareProfile, TakesNvmlProfileNamesOnly) {
  for (const char* good : {"1g.10gb", "3g.40gb", "7g.80gb", "1g.10gb+me", "1c.3g.40gb"})
    EXPECT_TRUE(CheckMigProfile(good)) << good;
  for (const char* bad : {"", "3g", "3g.40", "g.40gb", "0g.10gb", "3G.40GB", "3g.40gb ",
                          "../3g.40gb", "3g.40gb;rm", "3g.40gb\n", "MIG-3g.40gb"})
    EXPECT_FALSE(CheckMigProfile(bad)) << bad;
}

TEST(MigShareProfile, NeverEchoesALongNameWhole) {
  const std::string hostile = "1g." + std::string(5000, 'A') + "gb";
  auto status = CheckMigProfile(hostile);
  ASSERT_FALSE(status);
  EXPECT_LT(status.error().message.size(), 200u);
  EXPECT_EQ(status.error().message.find(std::string(100, 'A')), std::string::npos);
}

TEST(MigShareProfile, MemoryFromTheNameInDecimalGigabytes) {
  EXPECT_EQ(MigProfileMemoryBytes("3g.40gb"), uint64_t{40} * 1000 * 1000 * 1000);
  EXPECT_EQ(MigProfileMemoryBytes("1c.3g.40gb"), uint64_t{40} * 1000 * 1000 * 1000);
  EXPECT_EQ(MigProfileMemoryBytes("1g.10gb+me"), uint64_t{10} * 1000 * 1000 * 1000);
  EXPECT_EQ(MigProfileMemoryBytes("nonsense"), 0u);
}

TEST(MigShareFlag, AProfileBeforeAColonNamesTheSlice) {
  auto share = ParseShareFlag("3g.40gb:10Gi,50");
  ASSERT_TRUE(share) << share.error().message;
  EXPECT_EQ(*share, MigShare(10 * kGiB, 50));
  share = ParseShareFlag("1g.10gb+me:2Gi,25,mps");
  ASSERT_TRUE(share) << share.error().message;
  EXPECT_EQ(share->mig_profile, "1g.10gb+me");
  // Without a colon it is a share of a whole GPU, as before.
  EXPECT_EQ(ParseShareFlag("10Gi,50")->mig_profile, "");
}

TEST(MigShareFlag, RefusesABadProfileOrATimeSlicedSliceShare) {
  for (const char* bad : {":10Gi,50", "3g:10Gi,50", "3g.40gb:10Gi", "3g.40gb:10Gi,50,timeslice",
                          "a:b:10Gi,50", "3g.40gb:3g.40gb:10Gi,50"})
    EXPECT_FALSE(ParseShareFlag(bad)) << bad;
  auto sliced = ParseShareFlag("3g.40gb:10Gi,50,timeslice");
  ASSERT_FALSE(sliced);
  EXPECT_NE(sliced.error().message.find("MPS"), std::string::npos) << sliced.error().message;
}

TEST(MigShareCheck, ChecksTheProfileAndTheMode) {
  EXPECT_TRUE(CheckShare(MigShare(10 * kGiB, 50)));
  EXPECT_FALSE(CheckShare(MigShare(10 * kGiB, 50, "3g.40gb/../x")));
  Share sliced = MigShare(10 * kGiB, 50);
  sliced.mode = Mode::kTimeslice;
  EXPECT_FALSE(CheckShare(sliced));
}

TEST(MigShareFraction, IsItsFractionOfTheSliceTimesTheSlicesOfTheGpu) {
  const uint64_t slice = 40 * kGiB;
  const double of_gpu = placement::MigGpuFraction(3, 7);
  // 10 GiB of 40 (0.25) and 50 % compute: the compute is larger.
  EXPECT_DOUBLE_EQ(MigShareFraction(MigShare(10 * kGiB, 50), slice, of_gpu), 0.5 * 3.0 / 7.0);
  // 30 GiB of 40 (0.75) and 10 %: the memory.
  EXPECT_DOUBLE_EQ(MigShareFraction(MigShare(30 * kGiB, 10), slice, of_gpu), 0.75 * 3.0 / 7.0);
  // A whole slice's worth is the slice's fraction of the GPU, never more.
  EXPECT_DOUBLE_EQ(MigShareFraction(MigShare(80 * kGiB, 100), slice, of_gpu), 3.0 / 7.0);
}

TEST(MigSlicePlacement, OnlySlicesOfItsProfileTheFullestFirst) {
  const std::vector<SharedSlice> slices = {
      Slice("1g.10gb", 10 * kGiB),
      Slice("3g.40gb", 40 * kGiB),
      Slice("3g.40gb", 40 * kGiB, {MigShare(10 * kGiB, 20)}, "t1"),
  };
  auto chosen = ChooseSlice(slices, MigShare(10 * kGiB, 50), "t1", {});
  ASSERT_TRUE(chosen) << chosen.error().message;
  EXPECT_EQ(*chosen, 2u);  // joins the slice its tenancy already shares
  // Another tenancy never joins an MPS slice: it takes the free one.
  chosen = ChooseSlice(slices, MigShare(10 * kGiB, 50), "t2", {});
  ASSERT_TRUE(chosen) << chosen.error().message;
  EXPECT_EQ(*chosen, 1u);
  auto none = ChooseSlice(slices, MigShare(kGiB, 10, "2g.20gb"), "t1", {});
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message.find("no MIG slice of 2g.20gb"), std::string::npos);
}

TEST(MigSlicePlacement, NeverPastTheSlicesMemoryLessTheReserveOrItsCompute) {
  const std::vector<SharedSlice> slices = {
      Slice("3g.40gb", 40 * kGiB, {MigShare(20 * kGiB, 60)}, "t1"),
  };
  // 40 GiB less the 1 GiB reserve less 20 held: 19 GiB.
  EXPECT_TRUE(ChooseSlice(slices, MigShare(19 * kGiB, 40), "t1", {}));
  auto memory = ChooseSlice(slices, MigShare(20 * kGiB, 40), "t1", {});
  ASSERT_FALSE(memory);
  EXPECT_NE(memory.error().message.find("19 GiB of memory free"), std::string::npos)
      << memory.error().message;
  auto compute = ChooseSlice(slices, MigShare(kGiB, 41), "t1", {});
  ASSERT_FALSE(compute);
  EXPECT_NE(compute.error().message.find("40% of compute free"), std::string::npos);
}

TEST(MigSlicePlacement, ASliceHeldWholeNeverTakesAShare) {
  const std::vector<SharedSlice> slices = {
      Slice("3g.40gb", 40 * kGiB, {}, "", /*placeable=*/false),
  };
  auto chosen = ChooseSlice(slices, MigShare(kGiB, 10), "t1", {});
  ASSERT_FALSE(chosen);
  EXPECT_NE(chosen.error().message.find("not open to shares"), std::string::npos);
}

}  // namespace
}  // namespace tessera::sharing

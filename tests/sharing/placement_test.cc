#include <gtest/gtest.h>

#include "sharing/sharing.h"

namespace tessera::sharing {
namespace {

const Share k20{20 * kGiB, 25, Mode::kMps};

SharedGpu Gpu(uint64_t memory, std::vector<Share> held = {}, std::string tenancy = "") {
  return SharedGpu{memory, true, std::move(held), std::move(tenancy)};
}

TEST(SharePlacement, NeverOvercommitsMemoryLessTheReserve) {
  PlacementRules rules;  // 1 GiB reserve
  // 80 GiB board: three 20 GiB shares leave 19 GiB usable, not 20.
  std::vector<SharedGpu> gpus = {Gpu(80 * kGiB, {k20, k20, k20}, "t1")};
  auto chosen = ChooseGpu(gpus, k20, "t1", rules);
  ASSERT_FALSE(chosen);
  EXPECT_EQ(chosen.error().category, ErrorCategory::kFailedPrecondition);
  EXPECT_NE(chosen.error().message.find("19 GiB of memory free"), std::string::npos)
      << chosen.error().message;
  EXPECT_TRUE(ChooseGpu(gpus, {19 * kGiB, 25, Mode::kMps}, "t1", rules));
  rules.reserve_bytes = 0;
  EXPECT_TRUE(ChooseGpu(gpus, k20, "t1", rules));
}

TEST(SharePlacement, NeverOvercommitsCompute) {
  std::vector<SharedGpu> gpus = {Gpu(80 * kGiB, {{kGiB, 60, Mode::kMps}}, "t1")};
  EXPECT_TRUE(ChooseGpu(gpus, {kGiB, 40, Mode::kMps}, "t1", {}));
  auto chosen = ChooseGpu(gpus, {kGiB, 41, Mode::kMps}, "t1", {});
  ASSERT_FALSE(chosen);
  EXPECT_NE(chosen.error().message.find("40% of compute free"), std::string::npos);
}

TEST(SharePlacement, OneTenancyPerGpuUnlessTheOperatorAllowsMoreOnTimeSlicedOnes) {
  const Share sliced{20 * kGiB, 20, Mode::kTimeslice};
  std::vector<SharedGpu> gpus = {Gpu(80 * kGiB, {sliced}, "t1")};
  auto chosen = ChooseGpu(gpus, sliced, "t2", {});
  ASSERT_FALSE(chosen);
  EXPECT_NE(chosen.error().message.find("another tenancy"), std::string::npos);
  PlacementRules across;
  across.across_tenancies = true;
  EXPECT_EQ(*ChooseGpu(gpus, sliced, "t2", across), 0u);
  gpus.clear();
  // An MPS daemon, its pipe directory and its shm are never two tenancies' writable paths:
  // not even when the operator lets tenancies mix.
  gpus.push_back(Gpu(80 * kGiB, {k20}, "t1"));
  auto mps = ChooseGpu(gpus, k20, "t2", across);
  ASSERT_FALSE(mps);
  EXPECT_NE(mps.error().message.find("another tenancy"), std::string::npos);
  // An empty GPU takes anyone.
  gpus.push_back(Gpu(80 * kGiB));
  EXPECT_EQ(*ChooseGpu(gpus, k20, "t2", {}), 1u);
}

TEST(SharePlacement, OneModePerGpu) {
  std::vector<SharedGpu> gpus = {Gpu(80 * kGiB, {k20}, "t1")};
  auto chosen = ChooseGpu(gpus, {kGiB, 10, Mode::kTimeslice}, "t1", {});
  ASSERT_FALSE(chosen);
  EXPECT_NE(chosen.error().message.find("shared by mps"), std::string::npos);
}

TEST(SharePlacement, FullestGpuFirstSoIdleOnesStayIdle) {
  std::vector<SharedGpu> gpus = {Gpu(80 * kGiB), Gpu(80 * kGiB, {k20}, "t1"),
                                 Gpu(80 * kGiB, {k20, k20}, "t1"), Gpu(80 * kGiB)};
  EXPECT_EQ(*ChooseGpu(gpus, k20, "t1", {}), 2u);
  gpus[2].placeable = false;  // drained, faulted
  EXPECT_EQ(*ChooseGpu(gpus, k20, "t1", {}), 1u);
  EXPECT_EQ(*ChooseGpu(gpus, k20, "t9", {}), 0u);
}

TEST(SharePlacement, SaysWhyNothingFits) {
  std::vector<SharedGpu> gpus = {Gpu(16 * kGiB), Gpu(80 * kGiB, {k20}, "t1")};
  gpus[0].placeable = false;
  auto chosen = ChooseGpu(gpus, k20, "t2", {});
  ASSERT_FALSE(chosen);
  EXPECT_NE(chosen.error().message.find("1 GPU(s): not open to shares"), std::string::npos)
      << chosen.error().message;
  EXPECT_NE(chosen.error().message.find("1 GPU(s): holds another tenancy's shares"),
            std::string::npos);
  EXPECT_FALSE(ChooseGpu({}, k20, "t1", {}));
}

// The index gives what the walk over every GPU gives, decision after decision, as room is taken
// and GPUs change: GPUs of three board sizes, some closed, both modes, tenancies alone or mixed.
void ExpectIndexChoosesAsTheWalk(bool across_tenancies) {
  uint64_t state = across_tenancies ? 7 : 11;
  auto next = [&state] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return state >> 33;
  };
  PlacementRules rules;
  rules.across_tenancies = across_tenancies;
  const uint64_t boards[] = {16 * kGiB, 24 * kGiB, 80 * kGiB};
  std::vector<SharedGpu> gpus(40);
  PlacementIndex index(rules);
  for (size_t i = 0; i < gpus.size(); ++i) {
    gpus[i] = Gpu(boards[next() % 3]);
    gpus[i].placeable = next() % 8 != 0;
    index.Set(i, gpus[i]);
  }
  int placed = 0, waited = 0;
  for (int round = 0; round < 3000; ++round) {
    if (round % 97 == 0) {
      // A GPU empties (its last share ended) or closes: set again.
      const size_t i = next() % gpus.size();
      gpus[i].held.clear();
      gpus[i].tenancy_uid.clear();
      gpus[i].placeable = next() % 4 != 0;
      index.Set(i, gpus[i]);
    }
    Share share{(1 + next() % 24) * kGiB / 2, static_cast<int>(1 + next() % 60),
                next() % 5 == 0 ? Mode::kTimeslice : Mode::kMps};
    const std::string tenancy = "t" + std::to_string(next() % 6);
    for (const auto& gpu : gpus)
      ASSERT_EQ(Fits(gpu, share, tenancy, rules), WhyNotFits(gpu, share, tenancy, rules).empty());
    auto walk = ChooseGpu(gpus, share, tenancy, rules);
    auto indexed = index.Choose(share, tenancy);
    ASSERT_EQ(walk.ok(), indexed.has_value()) << round;
    if (!indexed) {
      ++waited;
      continue;
    }
    ASSERT_EQ(*walk, *indexed) << round;
    EXPECT_EQ(index.Holds(*indexed, tenancy),
              !gpus[*indexed].held.empty() && gpus[*indexed].tenancy_uid == tenancy);
    if (gpus[*indexed].held.empty()) gpus[*indexed].tenancy_uid = tenancy;
    gpus[*indexed].held.push_back(share);
    index.Add(*indexed, share, tenancy);
    ++placed;
  }
  // Both outcomes were exercised.
  EXPECT_GT(placed, 100);
  EXPECT_GT(waited, 100);
  // Room for the smallest share there can be, on a GPU of any mode and tenancy.
  bool room = false;
  for (const auto& gpu : gpus) {
    const Share least{kMinShareMemory, 1, gpu.held.empty() ? Mode::kMps : gpu.held[0].mode};
    room = room || ChooseGpu({gpu}, least, gpu.tenancy_uid, rules).ok();
  }
  EXPECT_EQ(index.AnyRoom(), room);
}

TEST(SharePlacementIndex, ChoosesExactlyAsTheWalkOverEveryGpu) {
  ExpectIndexChoosesAsTheWalk(false);
}

TEST(SharePlacementIndex, ChoosesExactlyAsTheWalkAcrossTenancies) {
  ExpectIndexChoosesAsTheWalk(true);
}

TEST(SharePlacementIndex, HasNoRoomWhenEveryGpuIsFullClosedOrEmptyButTooSmall) {
  PlacementRules rules;
  PlacementIndex index(rules);
  EXPECT_FALSE(index.AnyRoom());
  index.Set(0, SharedGpu{80 * kGiB, false, {}, ""});  // closed
  index.Set(1, Gpu(80 * kGiB, {{40 * kGiB, 60, Mode::kMps}, {39 * kGiB, 40, Mode::kMps}}, "a"));
  index.Set(2, Gpu(kGiB));  // all of it the reserve
  EXPECT_FALSE(index.AnyRoom());
  EXPECT_FALSE(index.Choose({kMinShareMemory, 1, Mode::kMps}, "a").has_value());
  index.Set(0, Gpu(80 * kGiB));
  EXPECT_TRUE(index.AnyRoom());
  EXPECT_EQ(index.Choose({kMinShareMemory, 1, Mode::kMps}, "b"), 0u);
}

}  // namespace
}  // namespace tessera::sharing

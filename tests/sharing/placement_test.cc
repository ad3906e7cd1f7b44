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

}  // namespace
}  // namespace tessera::sharing

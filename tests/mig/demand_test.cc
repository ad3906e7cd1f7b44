// Shaping MIG by demand: where a new instance goes, what is destroyed for it (only idle ones),
// which GPU makes it, and where a request that fits nowhere waits.
#include <gtest/gtest.h>

#include <random>
#include <tuple>

#include "mig/mig.h"

namespace tessera::mig {
namespace {

// H100 profile IDs (data/mig-profiles/h100-80gb.yaml).
constexpr uint32_t k1g = 19, k2g = 14, k3g = 9, k4g = 5;

LiveInstance Gi(uint32_t id, uint32_t profile, uint32_t start, uint32_t size, bool busy) {
  return LiveInstance{id, profile, {start, size}, busy};
}

ShapeGpu H100(std::vector<LiveInstance> instances = {}) {
  ShapeGpu gpu;
  gpu.table = &BuiltinH100Table();
  gpu.instances = std::move(instances);
  return gpu;
}

const Profile& P(const char* name) {
  return *BuiltinH100Table().FindByName(name);
}

TEST(MigDemand, AOneSliceInstanceOnAnEmptyGpuLeavesTheLargeProfilesPossible) {
  auto step = PlanInstance(H100(), P("1g.10gb"));
  ASSERT_TRUE(step);
  EXPECT_TRUE(step->destroy.empty());
  // 4g.40gb and 7g.80gb may only start at 0: a 1g there would rule out 4g for good.
  EXPECT_EQ(step->create.placement.start, 6u);
  EXPECT_EQ(step->create.profile_id, k1g);
  EXPECT_EQ(step->largest_after, 4u);
}

TEST(MigDemand, NeverDestroysABusyInstance) {
  // A busy 1g at 0 and at 4: no 3g.40gb start (0 or 4) is free of busy work.
  ShapeGpu gpu = H100({Gi(1, k1g, 0, 1, true), Gi(2, k1g, 4, 1, true)});
  EXPECT_FALSE(PlanInstance(gpu, P("3g.40gb")));
  // With the one at 4 idle, it goes: the 3g lands at 4 and destroys only it.
  gpu.instances[1].busy = false;
  auto step = PlanInstance(gpu, P("3g.40gb"));
  ASSERT_TRUE(step);
  EXPECT_EQ(step->destroy, std::vector<uint32_t>{2});
  EXPECT_EQ(step->create.placement, (nvml::Placement{4, 4}));
}

TEST(MigDemand, PrefersFreeSlicesToDestroyingIdleInstances) {
  // Idle 1g instances fill 0..3; 4..7 are empty: the 3g goes there and nothing is destroyed.
  ShapeGpu gpu = H100({Gi(1, k1g, 0, 1, false), Gi(2, k1g, 1, 1, false), Gi(3, k1g, 2, 1, false),
                       Gi(4, k1g, 3, 1, false)});
  auto step = PlanInstance(gpu, P("3g.40gb"));
  ASSERT_TRUE(step);
  EXPECT_TRUE(step->destroy.empty());
  EXPECT_EQ(step->create.placement.start, 4u);
}

TEST(MigDemand, RespectsComputeSlicesAndInstanceLimits) {
  // A 4g at 0 and a 3g at 4 use all 7 compute slices: nothing more fits, even in free memory.
  ShapeGpu full = H100({Gi(1, k4g, 0, 4, true), Gi(2, k3g, 4, 4, true)});
  EXPECT_FALSE(PlanInstance(full, P("1g.10gb")));
  // Three busy 2g.20gb (the most an H100 holds) leave slices 6-7 open, but no fourth 2g.
  ShapeGpu twos = H100({Gi(1, k2g, 0, 2, true), Gi(2, k2g, 2, 2, true), Gi(3, k2g, 4, 2, true)});
  EXPECT_FALSE(PlanInstance(twos, P("2g.20gb")));
  EXPECT_TRUE(PlanInstance(twos, P("1g.10gb")));
}

TEST(MigDemand, ReservedSlicesTakeNothingNew) {
  ShapeGpu gpu = H100();
  gpu.reserved.push_back({0, 8});
  EXPECT_FALSE(PlanInstance(gpu, P("1g.10gb")));
  gpu.reserved = {{0, 4}};
  auto step = PlanInstance(gpu, P("2g.20gb"));
  ASSERT_TRUE(step);
  EXPECT_GE(step->create.placement.start, 4u);
}

TEST(MigDemand, ChoosesTheBusierGpuSoThatEmptyOnesStayWhole) {
  std::vector<ShapeGpu> gpus = {H100(), H100({Gi(1, k3g, 0, 4, true)})};
  auto choice = ChooseInstance(gpus, "2g.20gb");
  ASSERT_TRUE(choice);
  EXPECT_EQ(choice->gpu, 1u);
  EXPECT_GE(choice->step.create.placement.start, 4u);
  // Unknown profile, or no board: no choice.
  EXPECT_FALSE(ChooseInstance(gpus, "9g.900gb"));
  gpus[0].table = nullptr;
  gpus[1].placeable = false;
  EXPECT_FALSE(ChooseInstance(gpus, "1g.10gb"));
}

TEST(MigDemand, AGpuThatNeedsNoDestroyWinsOverABusierOneThatDoes) {
  std::vector<ShapeGpu> gpus = {
      H100({Gi(1, k3g, 0, 4, true), Gi(2, k3g, 4, 4, false)}),  // busy, but the 3g must go
      H100()};
  auto choice = ChooseInstance(gpus, "2g.20gb");
  ASSERT_TRUE(choice);
  EXPECT_EQ(choice->gpu, 1u);
  EXPECT_TRUE(choice->step.destroy.empty());
}

TEST(MigDemand, AReservationWaitsWhereTheLeastBusyWorkIsInTheWay) {
  std::vector<ShapeGpu> gpus = {
      H100({Gi(1, k3g, 0, 4, true), Gi(2, k3g, 4, 4, true)}),
      H100({Gi(1, k1g, 0, 1, true), Gi(2, k1g, 5, 1, true), Gi(3, k2g, 2, 2, true)})};
  auto reservation = ChooseReservation(gpus, "7g.80gb");
  ASSERT_TRUE(reservation);
  EXPECT_EQ(reservation->gpu, 1u);  // 4 busy compute slices in the way, not 6
  EXPECT_EQ(reservation->placement, (nvml::Placement{0, 8}));
  EXPECT_FALSE(ChooseReservation(gpus, "nope"));
}

// A random valid H100 state: instances laid down at random allowed starts, some busy.
ShapeGpu RandomH100(std::mt19937& rng) {
  ShapeGpu gpu = H100();
  const auto& profiles = BuiltinH100Table().profiles;
  uint32_t next_id = 1;
  for (int tries = 0; tries < 6; ++tries) {
    const Profile& p = profiles[rng() % profiles.size()];
    const uint32_t start = p.starts[rng() % p.starts.size()];
    auto step = PlanInstance(gpu, p);
    bool clash = false;
    for (const auto& instance : gpu.instances)
      clash = clash || Overlaps(instance.placement, {start, p.size});
    if (!step || clash) continue;
    gpu.instances.push_back(Gi(next_id++, p.id, start, p.size, rng() % 2 == 0));
  }
  if (rng() % 5 == 0) gpu.reserved.push_back({0, 4});
  return gpu;
}

TEST(MigDemand, AFleetChoiceIsTheBestOfEveryGpuPlannedOnItsOwn) {
  // ChooseInstance plans each distinct GPU shape once; the answer must be what planning every GPU
  // separately gives.
  std::mt19937 rng(41);
  for (int round = 0; round < 200; ++round) {
    std::vector<ShapeGpu> gpus;
    for (int i = 0; i < 40; ++i)
      gpus.push_back(rng() % 3 == 0 ? H100() : RandomH100(rng));
    for (const auto& profile : BuiltinH100Table().profiles) {
      std::optional<size_t> want;
      std::tuple<size_t, int64_t, int64_t, int64_t> want_key;
      for (size_t i = 0; i < gpus.size(); ++i) {
        auto step = PlanInstance(gpus[i], profile);
        if (!step) continue;
        int64_t busy = 0;
        for (const auto& instance : gpus[i].instances)
          if (instance.busy)
            busy += BuiltinH100Table().FindById(instance.profile_id)->compute_slices;
        auto key =
            std::make_tuple(step->destroy.size(), -busy, -static_cast<int64_t>(step->largest_after),
                            -static_cast<int64_t>(step->open_after));
        if (!want || key < want_key) {
          want = i;
          want_key = key;
        }
      }
      auto choice = ChooseInstance(gpus, profile.name);
      ASSERT_EQ(choice.has_value(), want.has_value()) << profile.name << " round " << round;
      if (!choice) continue;
      EXPECT_EQ(choice->gpu, *want) << profile.name << " round " << round;
      auto alone = PlanInstance(gpus[*want], profile);
      EXPECT_EQ(choice->step.create.placement, alone->create.placement);
      EXPECT_EQ(choice->step.destroy, alone->destroy);
    }
  }
}

}  // namespace
}  // namespace tessera::mig

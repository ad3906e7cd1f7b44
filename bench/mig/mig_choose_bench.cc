// mig::ChooseInstance over 800 H100 GPUs at a realistic occupancy: every GPU filled with
// instances of a small-skewed mix until nothing more fits without destroying, about 4 in 5 of
// them busy (the rest idle, so the planner may destroy them), a few GPUs left empty.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "mig/mig.h"

using namespace tessera;

namespace {

// A 64-bit linear congruential generator: the same fleet every run.
struct Sequence {
  uint64_t state = 41;
  uint64_t Next() {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return state >> 33;
  }
};

const char* const kMix[] = {"1g.10gb", "1g.10gb", "1g.10gb", "1g.20gb", "2g.20gb",
                            "2g.20gb", "3g.40gb", "3g.40gb", "4g.40gb", "7g.80gb"};

std::vector<mig::ShapeGpu> Fleet(int gpus, int empty_every) {
  const mig::ProfileTable& table = mig::BuiltinH100Table();
  Sequence sequence;
  std::vector<mig::ShapeGpu> fleet(gpus);
  for (int g = 0; g < gpus; ++g) {
    mig::ShapeGpu& gpu = fleet[g];
    gpu.table = &table;
    if (g % empty_every == 0) continue;
    for (int attempt = 0; attempt < 12; ++attempt) {
      const mig::Profile* profile = table.FindByName(kMix[sequence.Next() % std::size(kMix)]);
      auto step = mig::PlanInstance(gpu, *profile);
      if (!step || !step->destroy.empty()) continue;
      mig::LiveInstance instance;
      instance.gpu_instance_id = static_cast<uint32_t>(gpu.instances.size() + 1);
      instance.profile_id = profile->id;
      instance.placement = step->create.placement;
      instance.busy = sequence.Next() % 5 != 0;
      gpu.instances.push_back(instance);
    }
  }
  return fleet;
}

void BM_ChooseInstance(benchmark::State& state, const char* profile) {
  const std::vector<mig::ShapeGpu> fleet = Fleet(800, static_cast<int>(state.range(0)));
  for (auto _ : state) {
    auto choice = mig::ChooseInstance(fleet, profile);
    benchmark::DoNotOptimize(choice);
  }
}

// What a caller could do instead: keep each GPU's PlanInstance result and its busy compute slices
// for the profile, re-plan only the GPU that changed since the last decision (one per decision),
// and pick by ChooseInstance's key from the kept results.
void BM_KeptPlansOneGpuChanged(benchmark::State& state, const char* name) {
  const std::vector<mig::ShapeGpu> fleet = Fleet(800, static_cast<int>(state.range(0)));
  const mig::Profile& profile = *mig::BuiltinH100Table().FindByName(name);
  auto key_of = [](const mig::ShapeGpu& gpu, const std::optional<mig::ShapeStep>& step) {
    uint32_t busy = 0;
    for (const mig::LiveInstance& instance : gpu.instances)
      if (instance.busy) busy += gpu.table->FindById(instance.profile_id)->compute_slices;
    return std::make_tuple(step ? step->destroy.size() : SIZE_MAX, -static_cast<int64_t>(busy),
                           step ? -static_cast<int64_t>(step->largest_after) : 0,
                           step ? -static_cast<int64_t>(step->open_after) : 0);
  };
  std::vector<decltype(key_of(fleet[0], std::nullopt))> keys;
  for (const mig::ShapeGpu& gpu : fleet)
    keys.push_back(key_of(gpu, mig::PlanInstance(gpu, profile)));
  size_t changed = 0;
  for (auto _ : state) {
    changed = (changed + 1) % fleet.size();
    keys[changed] = key_of(fleet[changed], mig::PlanInstance(fleet[changed], profile));
    size_t best = 0;
    for (size_t g = 1; g < keys.size(); ++g)
      if (keys[g] < keys[best]) best = g;
    benchmark::DoNotOptimize(best);
  }
}

void BM_ChooseReservation(benchmark::State& state) {
  const std::vector<mig::ShapeGpu> fleet = Fleet(800, 1 << 30);
  for (auto _ : state) {
    auto reservation = mig::ChooseReservation(fleet, "7g.80gb");
    benchmark::DoNotOptimize(reservation);
  }
}

}  // namespace

// Argument: one GPU in N left empty (50: 16 of 800 empty; 1000000: none, so most calls must
// destroy idle instances or fail).
BENCHMARK_CAPTURE(BM_ChooseInstance, 1g.10gb, "1g.10gb")
    ->Arg(50)
    ->Arg(1000000)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_ChooseInstance, 3g.40gb, "3g.40gb")
    ->Arg(50)
    ->Arg(1000000)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_ChooseInstance, 7g.80gb, "7g.80gb")
    ->Arg(50)
    ->Arg(1000000)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_KeptPlansOneGpuChanged, 1g.10gb, "1g.10gb")
    ->Arg(50)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ChooseReservation)->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();

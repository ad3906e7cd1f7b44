// Shaping MIG by demand (pure): where one new instance goes on a GPU, which GPU makes it, and
// where a request that fits nowhere waits. Boards have at most 8 memory slices and a few dozen
// placements, so every start is scored: a decision is a few hundred small steps.
#include <algorithm>
#include <tuple>

#include "mig/mig.h"

namespace tessera::mig {
namespace {

uint32_t ComputeSlicesOf(const ProfileTable& table, uint32_t profile_id) {
  const Profile* profile = table.FindById(profile_id);
  return profile ? profile->compute_slices : 0;
}

// Which memory slices hold something after a change: kept instances, the new one, reservations.
std::vector<bool> Covered(const ShapeGpu& gpu, const std::vector<const LiveInstance*>& kept,
                          const nvml::Placement& created) {
  std::vector<bool> covered(gpu.table->memory_slices, false);
  auto cover = [&](const nvml::Placement& p) {
    for (uint32_t s = p.start; s < p.start + p.size && s < covered.size(); ++s)
      covered[s] = true;
  };
  for (const LiveInstance* instance : kept)
    cover(instance->placement);
  for (const auto& reserved : gpu.reserved)
    cover(reserved);
  cover(created);
  return covered;
}

bool SlicesFree(const std::vector<bool>& covered, uint32_t start, uint32_t size) {
  if (start + size > covered.size()) return false;
  for (uint32_t s = start; s < start + size; ++s)
    if (covered[s]) return false;
  return true;
}

// What stays possible on slices nothing covers: the largest profile that could be made, and the
// open placements of every profile weighted by their size (a large one open is worth more).
void ScoreRemaining(const ProfileTable& table, const std::vector<bool>& covered, ShapeStep& step) {
  step.largest_after = 0;
  step.open_after = 0;
  for (const Profile& profile : table.profiles) {
    for (uint32_t start : profile.starts) {
      if (!SlicesFree(covered, start, profile.size)) continue;
      step.largest_after = std::max(step.largest_after, profile.size);
      step.open_after += profile.size;
    }
  }
}

// Making `profile` at `start`, or nullopt when that start is not possible.
std::optional<ShapeStep> TryStart(const ShapeGpu& gpu, const Profile& profile, uint32_t start) {
  const ProfileTable& table = *gpu.table;
  const nvml::Placement where{start, profile.size};
  if (start + profile.size > table.memory_slices) return std::nullopt;
  for (const auto& reserved : gpu.reserved)
    if (Overlaps(where, reserved)) return std::nullopt;
  ShapeStep step;
  std::vector<const LiveInstance*> kept;
  uint32_t compute = profile.compute_slices, same = 1;
  for (const LiveInstance& instance : gpu.instances) {
    if (Overlaps(where, instance.placement)) {
      if (instance.busy) return std::nullopt;
      step.destroy.push_back(instance.gpu_instance_id);
      continue;
    }
    kept.push_back(&instance);
    compute += ComputeSlicesOf(table, instance.profile_id);
    if (instance.profile_id == profile.id) ++same;
  }
  if (compute > table.compute_slices) return std::nullopt;
  if (profile.max_instances != 0 && same > profile.max_instances) return std::nullopt;
  step.create = {profile.id, profile.name, where};
  ScoreRemaining(table, Covered(gpu, kept, where), step);
  return step;
}

// Lower is better: fewest destroyed, then the most left possible.
auto StepKey(const ShapeStep& step) {
  return std::make_tuple(step.destroy.size(), -static_cast<int64_t>(step.largest_after),
                         -static_cast<int64_t>(step.open_after));
}

uint32_t BusyComputeSlices(const ShapeGpu& gpu) {
  uint32_t busy = 0;
  for (const LiveInstance& instance : gpu.instances)
    if (instance.busy) busy += ComputeSlicesOf(*gpu.table, instance.profile_id);
  return busy;
}

}  // namespace

std::optional<ShapeStep> PlanInstance(const ShapeGpu& gpu, const Profile& profile) {
  if (!gpu.table || !gpu.placeable) return std::nullopt;
  std::optional<ShapeStep> best;
  // Highest start first: on a tie the low starts, where the largest profiles must begin, stay
  // open.
  std::vector<uint32_t> starts = profile.starts;
  std::sort(starts.rbegin(), starts.rend());
  for (uint32_t start : starts) {
    auto step = TryStart(gpu, profile, start);
    if (step && (!best || StepKey(*step) < StepKey(*best))) best = std::move(step);
  }
  return best;
}

std::optional<ShapeChoice> ChooseInstance(const std::vector<ShapeGpu>& gpus,
                                          std::string_view profile_name) {
  std::optional<ShapeChoice> best;
  std::tuple<size_t, int64_t, int64_t, int64_t> best_key;
  for (size_t i = 0; i < gpus.size(); ++i) {
    const ShapeGpu& gpu = gpus[i];
    const Profile* profile = gpu.table ? gpu.table->FindByName(profile_name) : nullptr;
    if (!profile) continue;
    auto step = PlanInstance(gpu, *profile);
    if (!step) continue;
    auto [destroyed, largest, open] = StepKey(*step);
    auto key =
        std::make_tuple(destroyed, -static_cast<int64_t>(BusyComputeSlices(gpu)), largest, open);
    if (!best || key < best_key) {
      best = ShapeChoice{i, std::move(*step)};
      best_key = key;
    }
  }
  return best;
}

std::optional<Reservation> ChooseReservation(const std::vector<ShapeGpu>& gpus,
                                             std::string_view profile_name) {
  std::optional<Reservation> best;
  uint32_t best_blocking = 0;
  for (size_t i = 0; i < gpus.size(); ++i) {
    const ShapeGpu& gpu = gpus[i];
    const Profile* profile = gpu.table ? gpu.table->FindByName(profile_name) : nullptr;
    if (!profile || !gpu.placeable) continue;
    for (uint32_t start : profile->starts) {
      const nvml::Placement where{start, profile->size};
      if (start + profile->size > gpu.table->memory_slices) continue;
      bool taken = std::any_of(gpu.reserved.begin(), gpu.reserved.end(),
                               [&](const auto& reserved) { return Overlaps(where, reserved); });
      if (taken) continue;
      uint32_t blocking = 0;
      for (const LiveInstance& instance : gpu.instances)
        if (instance.busy && Overlaps(where, instance.placement))
          blocking += ComputeSlicesOf(*gpu.table, instance.profile_id);
      if (!best || blocking < best_blocking) {
        best = Reservation{i, where};
        best_blocking = blocking;
      }
    }
  }
  return best;
}

}  // namespace tessera::mig

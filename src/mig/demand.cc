// Shaping MIG by demand (pure): where one new instance goes on a GPU, which GPU makes it, and
// where a request that fits nowhere waits. Boards have at most 8 memory slices and a few dozen
// placements, so every start is scored, on bit masks of memory slices without allocating. A
// fleet holds few distinct GPU shapes (empty, full, a handful of layouts): across GPUs each shape
// is planned once per call.
#include <algorithm>
#include <array>
#include <tuple>
#include <unordered_map>

#include "mig/mig.h"

namespace tessera::mig {
namespace {

// Boards have 8 memory slices; masks of 32 leave room and keep shifts defined (a table of more
// is not shaped).
constexpr uint32_t kMaskSlices = 32;
constexpr size_t kMaskInstances = 32;

uint32_t MaskOf(uint32_t start, uint32_t size) {
  if (size == 0 || start >= kMaskSlices || size > kMaskSlices - start) return 0;
  const uint32_t ones = size == kMaskSlices ? ~0u : (1u << size) - 1;
  return ones << start;
}
uint32_t MaskOf(const nvml::Placement& p) {
  return MaskOf(p.start, p.size);
}

// A GPU's instances as masks, read once per plan.
struct Masks {
  std::array<uint32_t, kMaskInstances> mask{};
  std::array<uint32_t, kMaskInstances> compute{};
  std::array<uint32_t, kMaskInstances> profile{};
  std::array<bool, kMaskInstances> busy{};
  size_t count = 0;
  uint32_t reserved = 0;
};

bool ReadMasks(const ShapeGpu& gpu, Masks& out) {
  if (gpu.instances.size() > kMaskInstances || gpu.table->memory_slices > kMaskSlices) return false;
  for (const LiveInstance& instance : gpu.instances) {
    const Profile* profile = gpu.table->FindById(instance.profile_id);
    out.mask[out.count] = MaskOf(instance.placement);
    out.compute[out.count] = profile ? profile->compute_slices : 0;
    out.profile[out.count] = instance.profile_id;
    out.busy[out.count] = instance.busy;
    ++out.count;
  }
  for (const auto& reserved : gpu.reserved)
    out.reserved |= MaskOf(reserved);
  return true;
}

// One possible start, scored; the destroyed instances are named only for the winner.
struct Candidate {
  uint32_t start = 0;
  uint32_t destroys = 0;
  uint32_t largest_after = 0;
  uint32_t open_after = 0;
};

// Lower is better: fewest destroyed, then the most left possible.
auto KeyOf(const Candidate& c) {
  return std::make_tuple(c.destroys, -static_cast<int64_t>(c.largest_after),
                         -static_cast<int64_t>(c.open_after));
}

// What stays possible on slices nothing covers: the largest profile that could be made, and the
// open placements of every profile weighted by their size (a large one open is worth more).
void ScoreRemaining(const ProfileTable& table, uint32_t covered, Candidate& c) {
  for (const Profile& profile : table.profiles) {
    for (uint32_t start : profile.starts) {
      if (start + profile.size > table.memory_slices) continue;
      if (MaskOf(start, profile.size) & covered) continue;
      c.largest_after = std::max(c.largest_after, profile.size);
      c.open_after += profile.size;
    }
  }
}

std::optional<Candidate> TryStart(const ProfileTable& table, const Masks& m, const Profile& profile,
                                  uint32_t start) {
  if (start + profile.size > table.memory_slices) return std::nullopt;
  const uint32_t where = MaskOf(start, profile.size);
  if (where == 0 || (where & m.reserved)) return std::nullopt;
  Candidate c;
  c.start = start;
  uint32_t kept = 0, compute = profile.compute_slices, same = 1;
  for (size_t i = 0; i < m.count; ++i) {
    if (m.mask[i] & where) {
      if (m.busy[i]) return std::nullopt;
      ++c.destroys;
      continue;
    }
    kept |= m.mask[i];
    compute += m.compute[i];
    if (m.profile[i] == profile.id) ++same;
  }
  if (compute > table.compute_slices) return std::nullopt;
  if (profile.max_instances != 0 && same > profile.max_instances) return std::nullopt;
  ScoreRemaining(table, kept | m.reserved | where, c);
  return c;
}

std::optional<Candidate> BestStart(const ShapeGpu& gpu, const Profile& profile) {
  if (!gpu.table || !gpu.placeable) return std::nullopt;
  Masks masks;
  if (!ReadMasks(gpu, masks)) return std::nullopt;
  std::optional<Candidate> best;
  // Highest start first: on a tie the low starts, where the largest profiles must begin, stay
  // open.
  for (auto it = profile.starts.rbegin(); it != profile.starts.rend(); ++it) {
    auto c = TryStart(*gpu.table, masks, profile, *it);
    if (c && (!best || KeyOf(*c) < KeyOf(*best))) best = c;
  }
  return best;
}

ShapeStep StepFor(const ShapeGpu& gpu, const Profile& profile, const Candidate& c) {
  ShapeStep step;
  const nvml::Placement where{c.start, profile.size};
  for (const LiveInstance& instance : gpu.instances)
    if (Overlaps(where, instance.placement)) step.destroy.push_back(instance.gpu_instance_id);
  step.create = {profile.id, profile.name, where};
  step.largest_after = c.largest_after;
  step.open_after = c.open_after;
  return step;
}

uint32_t BusyComputeSlices(const ShapeGpu& gpu) {
  uint32_t busy = 0;
  for (const LiveInstance& instance : gpu.instances) {
    if (!instance.busy) continue;
    const Profile* profile = gpu.table->FindById(instance.profile_id);
    busy += profile ? profile->compute_slices : 0;
  }
  return busy;
}

// A GPU's shape as far as planning can tell: its board, its reservations and, per first memory
// slice, the instance starting there (profile and busy). Two GPUs of one shape plan alike.
// nullopt when the shape does not fit the key (a board with more than 8 slices, instances
// sharing a start): such a GPU is planned on its own.
struct ShapeKey {
  const ProfileTable* table = nullptr;
  uint64_t instances = 0;
  uint32_t reserved = 0;
  friend bool operator==(const ShapeKey&, const ShapeKey&) = default;
};
struct ShapeKeyHash {
  size_t operator()(const ShapeKey& k) const {
    return std::hash<uint64_t>()(k.instances * 31 + k.reserved) ^ std::hash<const void*>()(k.table);
  }
};

std::optional<ShapeKey> KeyOfGpu(const ShapeGpu& gpu) {
  if (gpu.table->memory_slices > 8 || gpu.instances.size() > 8) return std::nullopt;
  ShapeKey key{gpu.table, 0, 0};
  for (const LiveInstance& instance : gpu.instances) {
    const uint32_t start = instance.placement.start;
    if (start >= 8 || instance.profile_id > 126) return std::nullopt;
    const uint64_t code = (uint64_t{instance.profile_id} + 1) << 1 | (instance.busy ? 1 : 0);
    if ((key.instances >> (start * 8)) & 0xff) return std::nullopt;  // two start here
    key.instances |= code << (start * 8);
  }
  for (const auto& reserved : gpu.reserved)
    key.reserved |= MaskOf(reserved);
  return key;
}

// Per call: each distinct shape's answer, computed once.
template <typename Value, typename Compute>
class ShapeMemo {
 public:
  explicit ShapeMemo(Compute compute) : compute_(compute) {}
  Value Get(const ShapeGpu& gpu) {
    auto key = KeyOfGpu(gpu);
    if (!key) return compute_(gpu);
    auto [it, inserted] = memo_.try_emplace(*key);
    if (inserted) it->second = compute_(gpu);
    return it->second;
  }

 private:
  Compute compute_;
  std::unordered_map<ShapeKey, Value, ShapeKeyHash> memo_;
};

}  // namespace

std::optional<ShapeStep> PlanInstance(const ShapeGpu& gpu, const Profile& profile) {
  auto best = BestStart(gpu, profile);
  if (!best) return std::nullopt;
  return StepFor(gpu, profile, *best);
}

std::optional<ShapeChoice> ChooseInstance(const std::vector<ShapeGpu>& gpus,
                                          std::string_view profile_name) {
  // The profile per board, looked up once per board rather than once per GPU.
  const ProfileTable* last_table = nullptr;
  const Profile* profile = nullptr;
  auto plan = [&](const ShapeGpu& gpu) -> std::pair<std::optional<Candidate>, uint32_t> {
    return {BestStart(gpu, *profile), BusyComputeSlices(gpu)};
  };
  ShapeMemo<std::pair<std::optional<Candidate>, uint32_t>, decltype(plan)> memo(plan);
  std::optional<size_t> best_gpu;
  const Profile* best_profile = nullptr;
  Candidate best;
  std::tuple<uint32_t, int64_t, int64_t, int64_t> best_key;
  for (size_t i = 0; i < gpus.size(); ++i) {
    const ShapeGpu& gpu = gpus[i];
    if (!gpu.table || !gpu.placeable) continue;
    if (gpu.table != last_table) {
      last_table = gpu.table;
      profile = gpu.table->FindByName(profile_name);
    }
    if (!profile) continue;
    auto [candidate, busy] = memo.Get(gpu);
    if (!candidate) continue;
    auto [destroys, largest, open] = KeyOf(*candidate);
    auto key = std::make_tuple(destroys, -static_cast<int64_t>(busy), largest, open);
    if (!best_gpu || key < best_key) {
      best_gpu = i;
      best_profile = profile;
      best = *candidate;
      best_key = key;
    }
  }
  if (!best_gpu) return std::nullopt;
  return ShapeChoice{*best_gpu, StepFor(gpus[*best_gpu], *best_profile, best)};
}

std::optional<Reservation> ChooseReservation(const std::vector<ShapeGpu>& gpus,
                                             std::string_view profile_name) {
  const ProfileTable* last_table = nullptr;
  const Profile* profile = nullptr;
  // Per GPU: the start whose busy instances in the way hold the fewest compute slices.
  auto least_blocked = [&](const ShapeGpu& gpu) -> std::optional<std::pair<uint32_t, uint32_t>> {
    Masks m;
    if (!ReadMasks(gpu, m)) return std::nullopt;
    std::optional<std::pair<uint32_t, uint32_t>> best;  // (blocking, start)
    for (uint32_t start : profile->starts) {
      if (start + profile->size > gpu.table->memory_slices) continue;
      const uint32_t where = MaskOf(start, profile->size);
      if (where == 0 || (where & m.reserved)) continue;
      uint32_t blocking = 0;
      for (size_t i = 0; i < m.count; ++i)
        if (m.busy[i] && (m.mask[i] & where)) blocking += m.compute[i];
      if (!best || blocking < best->first) best = std::pair(blocking, start);
    }
    return best;
  };
  ShapeMemo<std::optional<std::pair<uint32_t, uint32_t>>, decltype(least_blocked)> memo(
      least_blocked);
  std::optional<Reservation> best;
  uint32_t best_blocking = 0;
  for (size_t i = 0; i < gpus.size(); ++i) {
    const ShapeGpu& gpu = gpus[i];
    if (!gpu.table || !gpu.placeable) continue;
    if (gpu.table != last_table) {
      last_table = gpu.table;
      profile = gpu.table->FindByName(profile_name);
    }
    if (!profile) continue;
    auto found = memo.Get(gpu);
    if (!found) continue;
    if (!best || found->first < best_blocking) {
      best = Reservation{i, {found->second, profile->size}};
      best_blocking = found->first;
    }
  }
  return best;
}

}  // namespace tessera::mig

// Planning a GPU's MIG change: which instances stay, which go, where the new ones are placed.
// Pure: a GpuState and a layout entry in, a plan out.
#include <algorithm>
#include <functional>

#include "mig/mig.h"

namespace tessera::mig {
namespace {

// Places `wanted` into the memory slices not in `occupied`, biggest first; depth-first over each
// profile's allowed starts (at most 8 slices on today's boards, so the search is tiny).
bool Place(const std::vector<const Profile*>& wanted, size_t next, std::vector<bool>& occupied,
           std::vector<Creation>& out) {
  if (next == wanted.size()) return true;
  const Profile& profile = *wanted[next];
  for (uint32_t start : profile.starts) {
    if (start + profile.size > occupied.size()) continue;
    bool free = true;
    for (uint32_t s = start; s < start + profile.size; ++s)
      free = free && !occupied[s];
    if (!free) continue;
    for (uint32_t s = start; s < start + profile.size; ++s)
      occupied[s] = true;
    out.push_back({profile.id, profile.name, {start, profile.size}});
    if (Place(wanted, next + 1, occupied, out)) return true;
    out.pop_back();
    for (uint32_t s = start; s < start + profile.size; ++s)
      occupied[s] = false;
  }
  return false;
}

std::optional<std::vector<Creation>> PlaceAll(std::vector<const Profile*> wanted,
                                              const std::vector<nvml::Placement>& kept,
                                              uint32_t memory_slices) {
  std::vector<bool> occupied(memory_slices, false);
  for (const auto& placement : kept) {
    for (uint32_t s = placement.start; s < placement.start + placement.size && s < memory_slices;
         ++s)
      occupied[s] = true;
  }
  std::stable_sort(wanted.begin(), wanted.end(), [](const Profile* a, const Profile* b) {
    if (a->size != b->size) return a->size > b->size;
    return a->starts.size() < b->starts.size();
  });
  std::vector<Creation> out;
  if (!Place(wanted, 0, occupied, out)) return std::nullopt;
  std::sort(out.begin(), out.end(), [](const Creation& a, const Creation& b) {
    return a.placement.start < b.placement.start;
  });
  return out;
}

}  // namespace

Result<GpuPlan> PlanGpu(const GpuState& state, const std::optional<LayoutEntry>& wanted,
                        const ProfileTable& table) {
  GpuPlan plan;
  plan.pci_address = state.pci_address;
  if (!wanted || !wanted->mig_enabled) {
    for (const Instance& instance : state.instances)
      plan.destroy.push_back(instance.gpu_instance_id);
    if (state.mig_enabled || state.mig_pending) plan.set_mig_mode = false;
    return plan;
  }

  // The wanted profiles, checked against the board.
  std::vector<const Profile*> want;
  uint32_t compute = 0, memory = 0;
  for (const auto& [name, count] : wanted->mig_devices) {
    const Profile* profile = table.FindByName(name);
    if (!profile) {
      std::string known;
      for (const auto& p : table.profiles)
        known += (known.empty() ? "" : ", ") + p.name;
      return InvalidArgument("profile \"" + name.substr(0, 32) + "\" is not offered by " +
                             table.board + " (offered: " + known + ")");
    }
    if (count > profile->max_instances) {
      return InvalidArgument(std::to_string(count) + " × " + name + ": " + table.board +
                             " holds at most " + std::to_string(profile->max_instances));
    }
    for (uint32_t i = 0; i < count; ++i)
      want.push_back(profile);
    compute += profile->compute_slices * count;
    memory += profile->size * count;
  }
  if (compute > table.compute_slices || memory > table.memory_slices) {
    return InvalidArgument("layout needs " + std::to_string(compute) + " compute and " +
                           std::to_string(memory) + " memory slices; " + table.board + " has " +
                           std::to_string(table.compute_slices) + " and " +
                           std::to_string(table.memory_slices));
  }

  if (!state.mig_enabled) plan.set_mig_mode = true;
  // Keep instances that are whole MIG devices of a wanted profile, lowest placement first.
  std::vector<Instance> current = state.mig_enabled ? state.instances : std::vector<Instance>{};
  std::sort(current.begin(), current.end(), [](const Instance& a, const Instance& b) {
    return a.placement.start < b.placement.start;
  });
  std::vector<const Profile*> missing = want;
  std::vector<nvml::Placement> kept;
  std::vector<uint32_t> unwanted;
  for (const Instance& instance : current) {
    auto match = std::find_if(missing.begin(), missing.end(),
                              [&](const Profile* p) { return p->id == instance.profile_id; });
    if (match != missing.end() && instance.compute_instances == 1 && instance.whole) {
      missing.erase(match);
      kept.push_back(instance.placement);
    } else {
      unwanted.push_back(instance.gpu_instance_id);
    }
  }
  auto placed = PlaceAll(missing, kept, table.memory_slices);
  if (!placed) {
    // The kept instances block a fit: start over from an empty GPU.
    unwanted.clear();
    for (const Instance& instance : current)
      unwanted.push_back(instance.gpu_instance_id);
    placed = PlaceAll(want, {}, table.memory_slices);
    if (!placed) {
      return InvalidArgument("the layout's profiles cannot be placed together on " + table.board);
    }
  }
  plan.destroy = std::move(unwanted);
  plan.create = std::move(*placed);
  return plan;
}

std::vector<std::string> DescribePlan(const GpuPlan& plan, const ProfileTable& table) {
  std::vector<std::string> lines;
  if (plan.set_mig_mode) {
    lines.push_back(*plan.set_mig_mode ? "enable MIG mode" : "disable MIG mode");
  }
  for (uint32_t id : plan.destroy)
    lines.push_back("destroy GPU instance " + std::to_string(id));
  for (const Creation& c : plan.create) {
    lines.push_back("create " + c.profile + " (profile " + std::to_string(c.profile_id) +
                    ") at memory slices " + std::to_string(c.placement.start) + "-" +
                    std::to_string(c.placement.start + c.placement.size - 1));
  }
  if (lines.empty()) lines.push_back("no change (" + table.board + " layout in place)");
  return lines;
}

}  // namespace tessera::mig

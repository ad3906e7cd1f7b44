#include <algorithm>
#include <numeric>

#include "placement/placement.h"

namespace tessera::placement {
namespace {

struct ParentView {
  size_t index = 0;
  uint32_t used = 0;  // compute slices in use
  std::vector<size_t> free_slots;
};

}  // namespace

Result<std::vector<MigChoice>> PackMigSlices(const std::vector<MigParent>& parents,
                                             std::string_view profile, int count) {
  if (count < 1 || count > kMaxMigSlicesPerRequest) {
    return InvalidArgument("MIG slice count must be 1.." + std::to_string(kMaxMigSlicesPerRequest));
  }
  std::vector<ParentView> candidates;
  size_t free_total = 0;
  for (size_t p = 0; p < parents.size(); ++p) {
    const MigParent& parent = parents[p];
    if (!parent.placeable) continue;
    ParentView view{p, 0, {}};
    for (size_t s = 0; s < parent.slots.size(); ++s) {
      const MigSlot& slot = parent.slots[s];
      if (!slot.free) {
        view.used += slot.compute_slices;
      } else if (slot.profile == profile) {
        view.free_slots.push_back(s);
      }
    }
    if (view.free_slots.empty()) continue;
    free_total += view.free_slots.size();
    candidates.push_back(std::move(view));
  }
  if (free_total < static_cast<size_t>(count)) {
    return FailedPrecondition(std::to_string(count) + " free MIG slice(s) wanted, " +
                              std::to_string(free_total) + " free");
  }
  // Fullest first; among equally full, the one that can give the most (fewer parents), then
  // the lowest index.
  std::sort(candidates.begin(), candidates.end(), [](const ParentView& a, const ParentView& b) {
    if (a.used != b.used) return a.used > b.used;
    if (a.free_slots.size() != b.free_slots.size()) {
      return a.free_slots.size() > b.free_slots.size();
    }
    return a.index < b.index;
  });
  std::vector<MigChoice> chosen;
  for (const ParentView& view : candidates) {
    for (size_t slot : view.free_slots) {
      if (chosen.size() == static_cast<size_t>(count)) return chosen;
      chosen.push_back({view.index, slot});
    }
  }
  return chosen;
}

double MigGpuFraction(uint32_t slice_compute_slices, uint32_t parent_compute_slices) {
  if (parent_compute_slices == 0) return 1;
  return std::min(1.0, static_cast<double>(slice_compute_slices) / parent_compute_slices);
}

uint32_t MigProfileComputeSlices(std::string_view profile) {
  // A leading "<n>c." names a compute instance's slices; otherwise "<n>g." the GPU instance's.
  uint32_t value = 0;
  size_t digits = 0;
  while (digits < profile.size() && digits < 3 && profile[digits] >= '0' && profile[digits] <= '9')
    value = value * 10 + static_cast<uint32_t>(profile[digits++] - '0');
  if (digits == 0 || digits == profile.size()) return 0;
  const char unit = profile[digits];
  if ((unit != 'c' && unit != 'g') || digits + 1 >= profile.size() || profile[digits + 1] != '.')
    return 0;
  return value;
}

uint32_t MigBoardComputeSlices(uint16_t pci_device_id) {
  // GA100 in the A30 (PCI 10de:20b7) has four compute slices; every other MIG board has seven.
  return pci_device_id == 0x20b7 ? 4 : 7;
}

}  // namespace tessera::placement

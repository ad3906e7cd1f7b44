// Where a share goes: never past a GPU's memory less its reserve, never past 100 % of its
// compute, one mode per GPU, one tenancy per GPU unless the operator allows more (time-slicing
// only: an MPS daemon is never shared between tenancies).
#include <fmt/format.h>

#include <map>
#include <optional>

#include "sharing/sharing.h"

namespace tessera::sharing {
namespace {

uint64_t MemoryHeld(const SharedGpu& gpu) {
  uint64_t sum = 0;
  for (const Share& share : gpu.held)
    sum += share.memory_bytes;
  return sum;
}

int ComputeHeld(const SharedGpu& gpu) {
  int sum = 0;
  for (const Share& share : gpu.held)
    sum += share.compute_percent;
  return sum;
}

}  // namespace

bool MayMixTenancies(const PlacementRules& rules, Mode mode) {
  // An MPS daemon, its pipe directory and its shm are one tenancy's, whatever the operator
  // allows: its clients share a fault domain and writable paths. Only time-slicing may mix.
  return rules.across_tenancies && mode == Mode::kTimeslice;
}

bool Fits(const SharedGpu& gpu, const Share& share, const std::string& tenancy_uid,
          const PlacementRules& rules) {
  if (!gpu.placeable) return false;
  if (!gpu.held.empty() && gpu.held.front().mode != share.mode) return false;
  if (!gpu.held.empty() && !MayMixTenancies(rules, share.mode) && gpu.tenancy_uid != tenancy_uid)
    return false;
  const uint64_t usable =
      gpu.memory_bytes > rules.reserve_bytes ? gpu.memory_bytes - rules.reserve_bytes : 0;
  const uint64_t held = MemoryHeld(gpu);
  const uint64_t free = usable > held ? usable - held : 0;
  return share.memory_bytes <= free && share.compute_percent <= 100 - ComputeHeld(gpu);
}

std::string WhyNotFits(const SharedGpu& gpu, const Share& share, const std::string& tenancy_uid,
                       const PlacementRules& rules) {
  if (!gpu.placeable) return "not open to shares";
  if (!gpu.held.empty() && gpu.held.front().mode != share.mode)
    return fmt::format("shared by {}", ModeName(gpu.held.front().mode));
  if (!gpu.held.empty() && !MayMixTenancies(rules, share.mode) && gpu.tenancy_uid != tenancy_uid)
    return "holds another tenancy's shares";
  const uint64_t usable =
      gpu.memory_bytes > rules.reserve_bytes ? gpu.memory_bytes - rules.reserve_bytes : 0;
  const uint64_t held = MemoryHeld(gpu);
  const uint64_t free = usable > held ? usable - held : 0;
  if (share.memory_bytes > free)
    return fmt::format("{} of memory free for shares", FormatGiB(free));
  const int compute_free = 100 - ComputeHeld(gpu);
  if (share.compute_percent > compute_free) return fmt::format("{}% of compute free", compute_free);
  return "";
}

Result<size_t> ChooseGpu(const std::vector<SharedGpu>& gpus, const Share& share,
                         const std::string& tenancy_uid, const PlacementRules& rules) {
  std::optional<size_t> best;
  uint64_t best_held = 0;
  // The most common reason, to say why nothing fits.
  std::map<std::string, int> reasons;
  for (size_t i = 0; i < gpus.size(); ++i) {
    std::string why = WhyNotFits(gpus[i], share, tenancy_uid, rules);
    if (!why.empty()) {
      ++reasons[why];
      continue;
    }
    const uint64_t held = MemoryHeld(gpus[i]);
    if (!best || held > best_held) {
      best = i;
      best_held = held;
    }
  }
  if (best) return *best;
  if (gpus.empty()) return FailedPrecondition("no GPU here can be shared");
  std::string text;
  for (const auto& [why, count] : reasons) {
    if (!text.empty()) text += "; ";
    text += fmt::format("{} GPU(s): {}", count, why);
  }
  return FailedPrecondition(fmt::format("no GPU has room for {} and {}% ({})",
                                        FormatMemory(share.memory_bytes), share.compute_percent,
                                        text));
}

// ---------------------------------------------------------------------------------------------
// PlacementIndex.

void PlacementIndex::Unlink(size_t index) {
  Slot& slot = slots_[index];
  if (!slot.indexed) return;
  slot.indexed = false;
  if (slot.count == 0) {
    auto it = empty_.find(slot.usable);
    it->second.erase(index);
    if (it->second.empty()) empty_.erase(it);
    return;
  }
  const Group group{static_cast<int>(slot.mode),
                    MayMixTenancies(rules_, slot.mode) ? "" : slot.tenancy_uid, slot.usable};
  auto it = shared_.find(group);
  it->second.erase({~slot.held, index});
  if (it->second.empty()) shared_.erase(it);
}

void PlacementIndex::Link(size_t index) {
  Slot& slot = slots_[index];
  slot.indexed = true;
  if (slot.count == 0) {
    empty_[slot.usable].insert(index);
    return;
  }
  const Group group{static_cast<int>(slot.mode),
                    MayMixTenancies(rules_, slot.mode) ? "" : slot.tenancy_uid, slot.usable};
  shared_[group].insert({~slot.held, index});
}

void PlacementIndex::Set(size_t index, const SharedGpu& gpu) {
  if (index >= slots_.size()) slots_.resize(index + 1);
  Unlink(index);
  Slot& slot = slots_[index];
  slot = Slot{};
  slot.usable =
      gpu.memory_bytes > rules_.reserve_bytes ? gpu.memory_bytes - rules_.reserve_bytes : 0;
  slot.held = MemoryHeld(gpu);
  slot.compute = ComputeHeld(gpu);
  slot.count = gpu.held.size();
  if (!gpu.held.empty()) {
    slot.mode = gpu.held.front().mode;
    slot.tenancy_uid = gpu.tenancy_uid;
  }
  if (gpu.placeable) Link(index);
}

void PlacementIndex::Add(size_t index, const Share& share, const std::string& tenancy_uid) {
  if (index >= slots_.size()) return;
  const bool indexed = slots_[index].indexed;
  Unlink(index);
  Slot& slot = slots_[index];
  if (slot.count == 0) {
    slot.mode = share.mode;
    slot.tenancy_uid = tenancy_uid;
  }
  slot.held += share.memory_bytes;
  slot.compute += share.compute_percent;
  ++slot.count;
  if (indexed) Link(index);
}

bool PlacementIndex::Holds(size_t index, const std::string& tenancy_uid) const {
  return index < slots_.size() && slots_[index].count > 0 &&
         slots_[index].tenancy_uid == tenancy_uid;
}

std::optional<size_t> PlacementIndex::Choose(const Share& share,
                                             const std::string& tenancy_uid) const {
  // The best as ChooseGpu ranks: the most memory held, then the lowest index.
  std::optional<size_t> best;
  uint64_t best_held = 0;
  auto consider = [&](size_t index, uint64_t held) {
    if (!best || held > best_held || (held == best_held && index < *best)) {
      best = index;
      best_held = held;
    }
  };
  const int mode = static_cast<int>(share.mode);
  const std::string tenancy = MayMixTenancies(rules_, share.mode) ? "" : tenancy_uid;
  // Shared GPUs of this mode (and tenancy), one group per board size: within a group the first
  // entry holding at most usable - memory is the fullest that has the memory; those after it are
  // passed over only for want of compute.
  for (auto it = shared_.lower_bound(Group{mode, tenancy, 0});
       it != shared_.end() && std::get<0>(it->first) == mode && std::get<1>(it->first) == tenancy;
       ++it) {
    const uint64_t usable = std::get<2>(it->first);
    if (usable < share.memory_bytes) continue;
    const uint64_t most = usable - share.memory_bytes;
    for (auto entry = it->second.lower_bound({~most, 0}); entry != it->second.end(); ++entry) {
      const Slot& slot = slots_[entry->second];
      if (share.compute_percent > 100 - slot.compute) continue;
      consider(entry->second, slot.held);
      break;
    }
  }
  // Empty GPUs with the memory: the lowest index (they hold nothing, so any shared one that fits
  // comes first).
  if (!best || best_held == 0) {
    for (auto it = empty_.lower_bound(share.memory_bytes); it != empty_.end(); ++it)
      consider(*it->second.begin(), 0);
  }
  return best;
}

bool PlacementIndex::AnyRoom() const {
  if (!empty_.empty() && empty_.rbegin()->first >= kMinShareMemory) return true;
  for (const auto& [group, entries] : shared_) {
    const uint64_t usable = std::get<2>(group);
    if (usable < kMinShareMemory) continue;
    for (auto entry = entries.lower_bound({~(usable - kMinShareMemory), 0}); entry != entries.end();
         ++entry)
      if (slots_[entry->second].compute < 100) return true;
  }
  return false;
}

}  // namespace tessera::sharing

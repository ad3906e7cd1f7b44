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

std::string WhyNotFits(const SharedGpu& gpu, const Share& share, const std::string& tenancy_uid,
                       const PlacementRules& rules) {
  if (!gpu.placeable) return "not open to shares";
  if (!gpu.held.empty() && gpu.held.front().mode != share.mode)
    return fmt::format("shared by {}", ModeName(gpu.held.front().mode));
  // An MPS daemon, its pipe directory and its shm are one tenancy's, whatever the operator
  // allows: its clients share a fault domain and writable paths. Only time-slicing may mix.
  const bool may_mix = rules.across_tenancies && share.mode == Mode::kTimeslice;
  if (!gpu.held.empty() && !may_mix && gpu.tenancy_uid != tenancy_uid)
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

}  // namespace tessera::sharing

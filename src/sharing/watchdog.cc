// The watchdog's judgement: per-container sums of the driver's per-process figures against each
// share, with a grace period so that a short peak is not a breach.
#include "sharing/sharing.h"

namespace tessera::sharing {

std::map<std::string, uint64_t> SumByContainer(const std::vector<ProcessUse>& processes) {
  std::map<std::string, uint64_t> sums;
  for (const ProcessUse& process : processes) {
    if (process.container_id.empty()) continue;  // unattributed: counted for no one
    uint64_t& sum = sums[process.container_id];
    sum = process.used_bytes > UINT64_MAX - sum ? UINT64_MAX : sum + process.used_bytes;
  }
  return sums;
}

std::string MemoryLimitReason(uint64_t used_bytes, uint64_t limit_bytes) {
  return "gpu-memory-limit: " + FormatGiB(used_bytes) + " used of " + FormatGiB(limit_bytes);
}

std::vector<Breach> Watchdog::Observe(Clock::time_point now,
                                      const std::map<std::string, uint64_t>& limits,
                                      const std::map<std::string, uint64_t>& used) {
  std::vector<Breach> breaches;
  for (auto it = over_.begin(); it != over_.end();) {
    it = limits.count(it->first) ? std::next(it) : over_.erase(it);
  }
  for (const auto& [container, limit] : limits) {
    auto measured = used.find(container);
    const uint64_t bytes = measured == used.end() ? 0 : measured->second;
    if (bytes <= limit) {
      over_.erase(container);
      continue;
    }
    auto [entry, inserted] = over_.try_emplace(container, Over{now, false});
    if (entry->second.reported || now - entry->second.since < grace_) continue;
    entry->second.reported = true;
    breaches.push_back({container, bytes, limit, MemoryLimitReason(bytes, limit)});
  }
  return breaches;
}

}  // namespace tessera::sharing

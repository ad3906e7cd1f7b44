// The watchdog's judgement: per-container sums of the driver's per-process figures against each
// share, sampled at jittered times; over its share in two samples within the grace is a breach.
#include <algorithm>

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
    if (bytes <= limit) continue;  // an earlier over-sample still counts until the grace passes
    auto [entry, inserted] = over_.try_emplace(container, Over{now, false});
    Over& over = entry->second;
    if (over.reported) continue;
    // Over in two samples no more than the grace apart (in one, with no grace): the samples
    // come at times nobody knows in advance, so a container cannot fit its peaks between them.
    const bool caught = grace_.count() == 0 || (!inserted && now - over.since <= grace_);
    if (!caught) {
      over.since = now;
      continue;
    }
    over.reported = true;
    breaches.push_back({container, bytes, limit, MemoryLimitReason(bytes, limit)});
  }
  return breaches;
}

std::chrono::milliseconds NextSampleDelay(std::chrono::milliseconds grace,
                                          std::chrono::milliseconds interval, double random01) {
  using std::chrono::milliseconds;
  // At least four samples a grace on average, so that any window of one grace holds two even
  // at the longest jittered gap (1.5 x grace / 4).
  milliseconds mean = interval;
  if (grace.count() > 0) mean = std::min(mean, grace / 4);
  mean = std::max(mean, milliseconds(10));
  const double factor = 0.5 + std::clamp(random01, 0.0, 1.0);
  return milliseconds(static_cast<int64_t>(static_cast<double>(mean.count()) * factor));
}

}  // namespace tessera::sharing

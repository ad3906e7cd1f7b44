// Bounds on what the service keeps and hands out: how long finished container records stay, and
// how large one page of a listing grows. Pure logic over records; the service applies it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "fleet/fleet.h"

namespace tessera::serve {

struct RetentionOptions {
  // A finished (exited or failed) record goes this long after it finished.
  std::chrono::milliseconds max_age = std::chrono::hours(24 * 7);
  // At most this many finished records per tenancy incarnation; the oldest go first.
  size_t per_tenancy = 10000;
  // How often the scheduler thread applies the policy.
  std::chrono::milliseconds sweep_interval = std::chrono::minutes(1);
};

// "250ms", "30s", "15m", "168h", "7d" (a whole number and a unit) in milliseconds.
Result<std::chrono::milliseconds> ParseDuration(std::string_view text);

// Positions in `containers` (creation order) of the finished records the policy drops: finished
// longer than max_age before `now_ms`, or older than the newest `per_tenancy` finished records of
// their tenancy incarnation. A record `pinned` says must stay is kept (and still counted).
std::vector<size_t> PlanRetention(const std::vector<const fleet::ContainerRecord*>& containers,
                                  const RetentionOptions& options, int64_t now_ms,
                                  const std::function<bool(const fleet::ContainerRecord&)>& pinned);

// An upper estimate of the bytes the API renders for `container` (its JSON object), counting
// the escapes its strings need, for bounding a listing page in bytes without rendering it.
size_t EstimatedJsonBytes(const fleet::ContainerRecord& container);

}  // namespace tessera::serve

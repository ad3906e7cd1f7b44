// Request rate limits: a token bucket per key (a token's ID, or a source address for requests
// without a valid token), in memory, with a bounded number of buckets. Pure apart from its lock:
// the caller hands in the time, so tests need no clock.
#pragma once

#include <chrono>
#include <cstddef>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/error.h"

namespace tessera::serve {

// Requests per second over time, and how many may come at once after a quiet spell.
// per_second == 0: no limit.
struct RateLimit {
  double per_second = 0;
  double burst = 0;
  bool unlimited() const { return per_second <= 0; }
  friend bool operator==(const RateLimit&, const RateLimit&) = default;
};
inline constexpr double kMaxRatePerSecond = 1e6;
inline constexpr double kMaxRateBurst = 1e6;

// The tenancy record's extension that holds its own rate limit ({"perSecond": N, "burst": M}, as
// RateLimitToJson writes it; "null": the service's defaults). The API sets it from `rateLimit`.
inline constexpr std::string_view kRateLimitExtension = "rateLimit";
// {"perSecond": 1..1e6 or 0 (no limit), "burst": 1..1e6 (default: perSecond, at least 1)}:
// strict, errors name the field under "rateLimit".
Result<RateLimit> ParseRateLimit(std::string_view json_text);
std::string RateLimitToJson(const RateLimit& limit);
// "50/s", "50" or "off" (--rate-limit).
Result<double> ParseRateFlag(std::string_view text);

class RateLimiter {
 public:
  using Clock = std::chrono::steady_clock;
  // At most `max_buckets` keys are remembered; past that, full buckets (a full bucket is the
  // same as a new one) are dropped (looked for at most every 100 ms), and meanwhile the keys
  // beyond share one bucket.
  explicit RateLimiter(size_t max_buckets = 65536) : max_buckets_(max_buckets) {}

  // Takes one request from `key`'s bucket. nullopt when it may go ahead; else how long until a
  // request would be let through, in whole seconds (at least 1): the Retry-After.
  std::optional<int> Take(const std::string& key, const RateLimit& limit, Clock::time_point now);
  // A revoked token's bucket goes with it.
  void Forget(const std::string& key);
  size_t size() const;

 private:
  struct Bucket {
    double tokens = 0;
    Clock::time_point refilled;
    double burst = 0;  // the capacity it was last filled to
    double per_second = 0;
  };
  void Refill(Bucket& bucket, const RateLimit& limit, Clock::time_point now) const;
  void DropFullLocked(Clock::time_point now);

  static constexpr std::chrono::milliseconds kSweepInterval{100};
  const size_t max_buckets_;
  mutable std::mutex mu_;  // guards buckets_, overflow_ and next_sweep_
  std::unordered_map<std::string, Bucket> buckets_;
  Bucket overflow_;
  bool overflow_used_ = false;
  Clock::time_point next_sweep_{};
};

}  // namespace tessera::serve

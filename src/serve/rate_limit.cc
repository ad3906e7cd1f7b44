#include "serve/rate_limit.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>

#include "common/strict_json.h"
#include "common/untrusted_text.h"

namespace tessera::serve {

namespace {

Result<double> BoundedRate(const nlohmann::json& value, const std::string& field, double low,
                           double high) {
  if (!value.is_number() || !std::isfinite(value.get<double>()))
    return InvalidArgument(field + ": must be a number");
  const double number = value.get<double>();
  if (number < low || number > high)
    return InvalidArgument(field + ": want " + (low == 0 ? "0 (no limit) or " : "") +
                           "a number from 1 to 1000000");
  return number;
}

}  // namespace

Result<RateLimit> ParseRateLimit(std::string_view json_text) {
  auto doc = ParseStrictJson(json_text, "rateLimit");
  if (!doc) return doc.error();
  if (!doc->is_object())
    return InvalidArgument("rateLimit: must be an object {\"perSecond\": N, \"burst\": M} or null");
  RateLimit limit;
  std::optional<double> burst;
  bool rate = false;
  for (const auto& [key, value] : doc->items()) {
    if (key == "perSecond") {
      auto parsed = BoundedRate(value, "rateLimit.perSecond", 0, kMaxRatePerSecond);
      if (!parsed) return parsed.error();
      if (*parsed > 0 && *parsed < 0.001)
        return InvalidArgument("rateLimit.perSecond: want 0 (no limit) or at least 0.001");
      limit.per_second = *parsed;
      rate = true;
    } else if (key == "burst") {
      auto parsed = BoundedRate(value, "rateLimit.burst", 1, kMaxRateBurst);
      if (!parsed) return parsed.error();
      burst = std::floor(*parsed);
    } else {
      return InvalidArgument("rateLimit." + Excerpt(key, 40) +
                             ": unknown field (perSecond, burst)");
    }
  }
  if (!rate) return InvalidArgument("rateLimit.perSecond: required");
  limit.burst = burst ? *burst : std::max(1.0, std::ceil(limit.per_second));
  return limit;
}

std::string RateLimitToJson(const RateLimit& limit) {
  return nlohmann::json{{"perSecond", limit.per_second}, {"burst", limit.burst}}.dump();
}

Result<double> ParseRateFlag(std::string_view text) {
  if (text == "off" || text == "0") return 0.0;
  std::string_view number = text;
  if (number.ends_with("/s")) number.remove_suffix(2);
  double value = 0;
  auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (ec != std::errc() || ptr != number.data() + number.size() || !std::isfinite(value) ||
      value < 0.001 || value > kMaxRatePerSecond)
    return InvalidArgument("\"" + Excerpt(text, 40) +
                           "\": want requests per second (\"50/s\", 0.001 to 1000000) or off");
  return value;
}

void RateLimiter::Refill(Bucket& bucket, const RateLimit& limit, Clock::time_point now) const {
  // A changed limit (a tenancy's own set or withdrawn) applies from now, the bucket kept as full
  // as it was but never above the new burst.
  const double elapsed = std::chrono::duration<double>(now - bucket.refilled).count();
  if (elapsed > 0) bucket.tokens += elapsed * bucket.per_second;
  bucket.per_second = limit.per_second;
  bucket.burst = limit.burst;
  bucket.tokens = std::min(bucket.tokens, limit.burst);
  bucket.refilled = std::max(bucket.refilled, now);
}

void RateLimiter::DropFullLocked(Clock::time_point now) {
  std::erase_if(buckets_, [&](const auto& entry) {
    const Bucket& bucket = entry.second;
    const double elapsed = std::chrono::duration<double>(now - bucket.refilled).count();
    return bucket.tokens + std::max(0.0, elapsed) * bucket.per_second >= bucket.burst;
  });
}

std::optional<int> RateLimiter::Take(const std::string& key, const RateLimit& limit,
                                     Clock::time_point now) {
  if (limit.unlimited()) return std::nullopt;
  std::lock_guard lock(mu_);
  auto it = buckets_.find(key);
  Bucket* bucket = nullptr;
  if (it != buckets_.end()) {
    bucket = &it->second;
  } else {
    // A sweep walks every bucket: at most one per kSweepInterval, so a flood of new keys while
    // every bucket is busy costs each request a look-up, not a walk.
    if (buckets_.size() >= max_buckets_ && now >= next_sweep_) {
      DropFullLocked(now);
      next_sweep_ = now + kSweepInterval;
    }
    if (buckets_.size() < max_buckets_) {
      bucket = &buckets_.emplace(key, Bucket{limit.burst, now, limit.burst, limit.per_second})
                    .first->second;
    } else {
      // Every remembered key is busy: the rest share one bucket rather than grow the map.
      if (!overflow_used_) overflow_ = Bucket{limit.burst, now, limit.burst, limit.per_second};
      overflow_used_ = true;
      bucket = &overflow_;
    }
  }
  Refill(*bucket, limit, now);
  if (bucket->tokens >= 1) {
    bucket->tokens -= 1;
    return std::nullopt;
  }
  const double wait = (1 - bucket->tokens) / limit.per_second;
  return static_cast<int>(std::max(1.0, std::ceil(wait)));
}

void RateLimiter::Forget(const std::string& key) {
  std::lock_guard lock(mu_);
  buckets_.erase(key);
}

size_t RateLimiter::size() const {
  std::lock_guard lock(mu_);
  return buckets_.size();
}

}  // namespace tessera::serve

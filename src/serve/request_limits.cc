#include "serve/request_limits.h"

#include <spdlog/spdlog.h>

namespace tessera::serve {

namespace {
constexpr size_t kMaxParsedLimits = 4096;
}  // namespace

RateLimit RequestLimits::LimitFor(const Caller& caller) {
  const RateLimit defaults = model_.options.rate_limit;
  if (caller.tenancy.empty()) return defaults;
  std::string text;
  {
    std::lock_guard lock(model_.mu);
    auto tenancy = model_.tenancies.find(caller.tenancy);
    if (tenancy == model_.tenancies.end() || tenancy->second.uid != caller.tenancy_uid)
      return defaults;
    auto extension = tenancy->second.extensions.find(std::string(kRateLimitExtension));
    if (extension == tenancy->second.extensions.end()) return defaults;
    text = extension->second;
  }
  std::lock_guard lock(cache_mu_);
  auto it = parsed_.find(text);
  if (it == parsed_.end()) {
    if (parsed_.size() >= kMaxParsedLimits) parsed_.clear();
    std::optional<RateLimit> value;
    // "null": the tenancy went back to the flags' limit.
    if (text != "null") {
      auto limit = ParseRateLimit(text);
      if (limit) {
        value = *limit;
      } else {
        spdlog::warn("tenancy {}: stored rate limit unreadable: {}", caller.tenancy,
                     limit.error().message);
      }
    }
    it = parsed_.emplace(text, value).first;
  }
  return it->second.value_or(defaults);
}

std::optional<int> RequestLimits::Charge(const Caller& caller) {
  if (caller.admin) return std::nullopt;
  return tokens_.Take(caller.token_id, LimitFor(caller), RateLimiter::Clock::now());
}

std::optional<int> RequestLimits::ChargeAnonymous(std::string_view address) {
  return addresses_.Take(std::string(address), model_.options.rate_limit,
                         RateLimiter::Clock::now());
}

}  // namespace tessera::serve

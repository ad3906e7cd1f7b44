// How often callers may send requests: a token bucket per token (the flags' rate, or its
// tenancy's own), and one per source address for requests that carry no valid token, so a
// flood of bad tokens costs a hash and a map look-up each. The admin token is not limited.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "serve/model.h"
#include "serve/rate_limit.h"
#include "serve/types.h"

namespace tessera::serve {

class RequestLimits {
 public:
  explicit RequestLimits(Model& model) : model_(model) {}

  // nullopt: go ahead; else the Retry-After in whole seconds (at least 1).
  std::optional<int> Charge(const Caller& caller);
  std::optional<int> ChargeAnonymous(std::string_view address);
  // A revoked token's bucket goes with it.
  void Forget(const std::string& token_id) { tokens_.Forget(token_id); }
  // The limit that applies to a caller now (the flags', or its tenancy's own).
  RateLimit LimitFor(const Caller& caller);

 private:
  Model& model_;
  RateLimiter tokens_;
  RateLimiter addresses_;
  std::mutex cache_mu_;  // guards parsed_
  // A tenancy's rateLimit extension text -> its value (bounded: cleared when it grows large).
  std::unordered_map<std::string, std::optional<RateLimit>> parsed_;
};

}  // namespace tessera::serve

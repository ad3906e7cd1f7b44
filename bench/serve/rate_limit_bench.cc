// What the request rate limits cost per request: RateLimiter::Take (the lock, the map look-up and
// the refill) for one busy token, for 10,000 tokens in turn, and for a flood of 1,000,000 new
// source addresses against the 65,536-bucket bound (full buckets dropped, the rest sharing one),
// also with every bucket busy. Prints nanoseconds per request and the buckets kept.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "serve/rate_limit.h"

namespace {

using tessera::serve::RateLimit;
using tessera::serve::RateLimiter;
using Clock = std::chrono::steady_clock;

void Run(const char* what, RateLimiter& limiter, const std::vector<std::string>& keys,
         size_t requests, const RateLimit& limit) {
  size_t refused = 0;
  const auto start = Clock::now();
  for (size_t i = 0; i < requests; ++i)
    if (limiter.Take(keys[i % keys.size()], limit, Clock::now())) ++refused;
  const double ns = std::chrono::duration<double, std::nano>(Clock::now() - start).count();
  std::printf("%-44s %8.0f ns/request  %zu requests, %zu refused, %zu buckets kept\n", what,
              ns / static_cast<double>(requests), requests, refused, limiter.size());
}

}  // namespace

int main() {
  const RateLimit limit{50, 100};
  {
    RateLimiter limiter;
    Run("one token", limiter, {"t-00000001"}, 1000000, limit);
  }
  {
    std::vector<std::string> keys;
    for (int i = 0; i < 10000; ++i)
      keys.push_back("t-" + std::to_string(10000000 + i));
    RateLimiter limiter;
    Run("10,000 tokens in turn", limiter, keys, 1000000, limit);
  }
  {
    std::vector<std::string> keys;
    for (int i = 0; i < 1000000; ++i)
      keys.push_back("10." + std::to_string(i >> 16) + "." + std::to_string((i >> 8) & 255) + "." +
                     std::to_string(i & 255));
    RateLimiter limiter;
    Run("1,000,000 new addresses (bound 65,536)", limiter, keys, keys.size(), limit);
  }
  {
    // The worst case for the bound: every bucket kept busy (a request per bucket just now), then
    // new addresses; they share the overflow bucket until a sweep finds full buckets.
    std::vector<std::string> busy, fresh;
    for (int i = 0; i < 65536; ++i)
      busy.push_back("busy-" + std::to_string(i));
    for (int i = 0; i < 1000000; ++i)
      fresh.push_back("new-" + std::to_string(i));
    RateLimiter limiter;
    Run("65,536 busy addresses", limiter, busy, busy.size(), limit);
    Run("then 1,000,000 new addresses", limiter, fresh, fresh.size(), limit);
  }
  return 0;
}

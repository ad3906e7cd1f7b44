// Token buckets of the request rate limits (pure: the test hands in the time): bursts, refill,
// Retry-After, limits that change, and bounded memory under many keys.
#include "serve/rate_limit.h"

#include <gtest/gtest.h>

namespace tessera::serve {
namespace {

using Clock = RateLimiter::Clock;
using std::chrono::milliseconds;

TEST(RateLimiter, LetsABurstThroughThenRefusesWithWholeSecondsToWait) {
  RateLimiter limiter;
  const RateLimit limit{2, 3};
  const auto t0 = Clock::time_point{} + std::chrono::hours(1);
  for (int i = 0; i < 3; ++i)
    EXPECT_FALSE(limiter.Take("t-1", limit, t0)) << i;
  auto retry = limiter.Take("t-1", limit, t0);
  ASSERT_TRUE(retry);
  EXPECT_EQ(*retry, 1);  // half a second to the next token, rounded up to whole seconds
  // Another key has its own bucket.
  EXPECT_FALSE(limiter.Take("t-2", limit, t0));
  // Half a second later one request is let through, then none.
  EXPECT_FALSE(limiter.Take("t-1", limit, t0 + milliseconds(500)));
  EXPECT_TRUE(limiter.Take("t-1", limit, t0 + milliseconds(500)));
  // A slow limit says how long: one request per 10 s.
  EXPECT_FALSE(limiter.Take("slow", RateLimit{0.1, 1}, t0));
  EXPECT_EQ(limiter.Take("slow", RateLimit{0.1, 1}, t0).value_or(0), 10);
}

TEST(RateLimiter, ALimitThatChangesAppliesFromNowAndNoLimitTakesNothing) {
  RateLimiter limiter;
  const auto t0 = Clock::time_point{} + std::chrono::hours(1);
  EXPECT_FALSE(limiter.Take("t", RateLimit{1, 10}, t0));
  // Lowered: the bucket holds at most the new burst.
  EXPECT_FALSE(limiter.Take("t", RateLimit{1, 1}, t0));
  EXPECT_TRUE(limiter.Take("t", RateLimit{1, 1}, t0));
  for (int i = 0; i < 1000; ++i)
    EXPECT_FALSE(limiter.Take("t", RateLimit{}, t0));
  EXPECT_EQ(limiter.size(), 1u);
  limiter.Forget("t");
  EXPECT_EQ(limiter.size(), 0u);
}

TEST(RateLimiter, ManyKeysKeepAtMostTheBoundAndShareOneBucketBeyondIt) {
  RateLimiter limiter(100);
  const RateLimit limit{1, 2};
  const auto t0 = Clock::time_point{} + std::chrono::hours(1);
  // 100 busy keys (each took a request: not full), then 10,000 more.
  for (int i = 0; i < 100; ++i)
    EXPECT_FALSE(limiter.Take("busy-" + std::to_string(i), limit, t0));
  int refused = 0;
  for (int i = 0; i < 10000; ++i)
    if (limiter.Take("flood-" + std::to_string(i), limit, t0)) ++refused;
  EXPECT_EQ(limiter.size(), 100u);
  // They shared one bucket of 2.
  EXPECT_EQ(refused, 10000 - 2);
  // Once the busy buckets refilled they are dropped for new keys.
  EXPECT_FALSE(limiter.Take("later", limit, t0 + std::chrono::seconds(5)));
  EXPECT_LE(limiter.size(), 100u);
}

TEST(RateLimitText, ParsesStrictlyAndReadsBackTheSame) {
  auto limit = ParseRateLimit(R"({"perSecond":5,"burst":20})");
  ASSERT_TRUE(limit);
  EXPECT_EQ(*limit, (RateLimit{5, 20}));
  EXPECT_EQ(*ParseRateLimit(RateLimitToJson(*limit)), *limit);
  EXPECT_EQ(ParseRateLimit(R"({"perSecond":2.5})")->burst, 3);  // burst defaults to the rate
  for (const auto& [text, field] : std::vector<std::pair<std::string, std::string>>{
           {R"({"burst":1})", "rateLimit.perSecond"},
           {R"({"perSecond":1e7})", "rateLimit.perSecond"},
           {R"({"perSecond":0.0001})", "rateLimit.perSecond"},
           {R"({"perSecond":"5"})", "rateLimit.perSecond"},
           {R"({"perSecond":5,"burst":0.5})", "rateLimit.burst"},
           {R"({"perSecond":5,"perSecond":6})", "rateLimit"},
           {R"([1])", "rateLimit"}}) {
    auto parsed = ParseRateLimit(text);
    ASSERT_FALSE(parsed) << text;
    EXPECT_EQ(parsed.error().message.rfind(field + ":", 0), 0u) << parsed.error().message;
  }
  EXPECT_EQ(*ParseRateFlag("50/s"), 50);
  EXPECT_EQ(*ParseRateFlag("0.5"), 0.5);
  EXPECT_EQ(*ParseRateFlag("off"), 0);
  EXPECT_FALSE(ParseRateFlag("fast"));
  EXPECT_FALSE(ParseRateFlag("-1/s"));
}

}  // namespace
}  // namespace tessera::serve

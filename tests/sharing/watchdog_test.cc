#include <gtest/gtest.h>

#include "sharing/sharing.h"

namespace tessera::sharing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(WatchdogSum, AddsEveryProcessOfAContainerAndNoOneElses) {
  auto sums = SumByContainer({{100, "c-a", 12 * kGiB},
                              {101, "c-a", 11 * kGiB},
                              {102, "c-b", 3 * kGiB},
                              {103, "", 40 * kGiB}});
  EXPECT_EQ(sums, (std::map<std::string, uint64_t>{{"c-a", 23 * kGiB}, {"c-b", 3 * kGiB}}));
  auto saturated = SumByContainer({{1, "c", UINT64_MAX}, {2, "c", 5}});
  EXPECT_EQ(saturated["c"], UINT64_MAX);
}

TEST(Watchdog, StopsOnTheSecondSampleOverItsShareWithinTheGraceAndOnce) {
  Watchdog watchdog(seconds(10));
  const auto t0 = Watchdog::Clock::time_point{} + seconds(100);
  const std::map<std::string, uint64_t> limits = {{"c-a", 20 * kGiB}, {"c-b", 20 * kGiB}};
  const uint64_t over = uint64_t(23.1 * kGiB);
  EXPECT_TRUE(watchdog.Observe(t0, limits, {{"c-a", over}, {"c-b", kGiB}}).empty());
  auto breaches = watchdog.Observe(t0 + seconds(9), limits, {{"c-a", over}});
  ASSERT_EQ(breaches.size(), 1u);
  EXPECT_EQ(breaches[0].container_id, "c-a");
  EXPECT_EQ(breaches[0].reason, "gpu-memory-limit: 23.1 GiB used of 20 GiB");
  EXPECT_TRUE(watchdog.Observe(t0 + seconds(11), limits, {{"c-a", over}}).empty());
}

TEST(Watchdog, APeakBetweenSamplesBelowItsShareIsStillCaughtByTheNextPeak) {
  // A container that allocates only between the times it expects samples: two peaks within the
  // grace are seen whatever it holds in between.
  Watchdog watchdog(seconds(10));
  const auto t0 = Watchdog::Clock::time_point{} + seconds(100);
  const std::map<std::string, uint64_t> limits = {{"c-a", 20 * kGiB}};
  EXPECT_TRUE(watchdog.Observe(t0, limits, {{"c-a", 21 * kGiB}}).empty());
  EXPECT_TRUE(watchdog.Observe(t0 + seconds(3), limits, {{"c-a", 19 * kGiB}}).empty());
  EXPECT_TRUE(watchdog.Observe(t0 + seconds(6), limits, {{"c-a", 1 * kGiB}}).empty());
  EXPECT_EQ(watchdog.Observe(t0 + seconds(9), limits, {{"c-a", 21 * kGiB}}).size(), 1u);
}

TEST(Watchdog, ALonePeakIsForgivenOnceTheGraceHasPassed) {
  Watchdog watchdog(seconds(10));
  const auto t0 = Watchdog::Clock::time_point{} + seconds(100);
  const std::map<std::string, uint64_t> limits = {{"c-a", 20 * kGiB}};
  EXPECT_TRUE(watchdog.Observe(t0, limits, {{"c-a", 21 * kGiB}}).empty());
  EXPECT_TRUE(watchdog.Observe(t0 + seconds(8), limits, {{"c-a", 19 * kGiB}}).empty());
  EXPECT_TRUE(watchdog.Observe(t0 + seconds(12), limits, {{"c-a", 21 * kGiB}}).empty());
  EXPECT_TRUE(watchdog.Observe(t0 + seconds(15), limits, {{"c-a", 19 * kGiB}}).empty());
  EXPECT_EQ(watchdog.Observe(t0 + seconds(21), limits, {{"c-a", 21 * kGiB}}).size(), 1u);
}

TEST(WatchdogSampling, KeepsTwoSamplesInEveryGraceAtTheLongestJitter) {
  for (double r : {0.0, 0.5, 0.999999}) {
    const auto delay = NextSampleDelay(seconds(10), seconds(5), r);
    EXPECT_GE(delay, milliseconds(1250));
    EXPECT_LT(delay, milliseconds(3750));
    EXPECT_LE(2 * delay, seconds(10));
  }
  // The interval, when shorter, sets the pace; never below 10 ms on average.
  EXPECT_EQ(NextSampleDelay(seconds(10), milliseconds(100), 0.5), milliseconds(100));
  EXPECT_EQ(NextSampleDelay(milliseconds(0), milliseconds(1), 0.5), milliseconds(10));
  // Not the same delay twice for different draws: the times cannot be predicted.
  EXPECT_NE(NextSampleDelay(seconds(10), seconds(5), 0.1),
            NextSampleDelay(seconds(10), seconds(5), 0.9));
}

TEST(Watchdog, AtTheLimitIsNotOverAndEndedContainersAreForgotten) {
  Watchdog watchdog(milliseconds(0));
  const auto t0 = Watchdog::Clock::time_point{} + seconds(1);
  EXPECT_TRUE(watchdog.Observe(t0, {{"c-a", 20 * kGiB}}, {{"c-a", 20 * kGiB}}).empty());
  EXPECT_EQ(watchdog.Observe(t0, {{"c-a", 20 * kGiB}}, {{"c-a", 20 * kGiB + 1}}).size(), 1u);
  // c-a ended; a new container with the same ID would be judged afresh.
  EXPECT_TRUE(watchdog.Observe(t0, {}, {{"c-a", 40 * kGiB}}).empty());
  EXPECT_EQ(watchdog.Observe(t0, {{"c-a", 20 * kGiB}}, {{"c-a", 40 * kGiB}}).size(), 1u);
}

}  // namespace
}  // namespace tessera::sharing

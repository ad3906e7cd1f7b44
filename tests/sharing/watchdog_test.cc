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

TEST(Watchdog, StopsOnlyAfterTheGraceAndOnce) {
  Watchdog watchdog(seconds(10));
  const auto t0 = Watchdog::Clock::time_point{} + seconds(100);
  const std::map<std::string, uint64_t> limits = {{"c-a", 20 * kGiB}, {"c-b", 20 * kGiB}};
  const uint64_t over = uint64_t(23.1 * kGiB);
  EXPECT_TRUE(watchdog.Observe(t0, limits, {{"c-a", over}, {"c-b", kGiB}}).empty());
  EXPECT_TRUE(watchdog.Observe(t0 + seconds(9), limits, {{"c-a", over}}).empty());
  auto breaches = watchdog.Observe(t0 + seconds(10), limits, {{"c-a", over}});
  ASSERT_EQ(breaches.size(), 1u);
  EXPECT_EQ(breaches[0].container_id, "c-a");
  EXPECT_EQ(breaches[0].reason, "gpu-memory-limit: 23.1 GiB used of 20 GiB");
  EXPECT_TRUE(watchdog.Observe(t0 + seconds(11), limits, {{"c-a", over}}).empty());
}

TEST(Watchdog, APeakBelowTheGraceStartsOver) {
  Watchdog watchdog(seconds(10));
  const auto t0 = Watchdog::Clock::time_point{} + seconds(100);
  const std::map<std::string, uint64_t> limits = {{"c-a", 20 * kGiB}};
  EXPECT_TRUE(watchdog.Observe(t0, limits, {{"c-a", 21 * kGiB}}).empty());
  EXPECT_TRUE(watchdog.Observe(t0 + seconds(8), limits, {{"c-a", 19 * kGiB}}).empty());
  EXPECT_TRUE(watchdog.Observe(t0 + seconds(12), limits, {{"c-a", 21 * kGiB}}).empty());
  EXPECT_TRUE(watchdog.Observe(t0 + seconds(21), limits, {{"c-a", 21 * kGiB}}).empty());
  EXPECT_EQ(watchdog.Observe(t0 + seconds(22), limits, {{"c-a", 21 * kGiB}}).size(), 1u);
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

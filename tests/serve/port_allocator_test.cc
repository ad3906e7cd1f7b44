// Host ports for published ports (pure): lowest free first, one holder at a time, held again
// after a restart, the operator's range checked.
#include "serve/port_allocator.h"

#include <gtest/gtest.h>

#include <set>

namespace tessera::serve {
namespace {

const std::function<bool(int)> kAny = [](int) { return true; };

TEST(PortAllocator, TakesTheLowestFreePorts) {
  PortAllocator ports(30000, 30009);
  auto a = ports.Take("a", 2, kAny);
  ASSERT_TRUE(a);
  EXPECT_EQ(*a, (std::vector<int>{30000, 30001}));
  auto b = ports.Take("b", 1, kAny);
  ASSERT_TRUE(b);
  EXPECT_EQ(*b, (std::vector<int>{30002}));
  EXPECT_EQ(ports.held(), 3u);
  EXPECT_EQ(ports.HolderOf(30001), "a");
}

TEST(PortAllocator, AReleasedPortGoesToTheNextContainer) {
  PortAllocator ports(30000, 30009);
  ASSERT_TRUE(ports.Take("a", 1, kAny));
  ASSERT_TRUE(ports.Take("b", 1, kAny));
  ports.Release("a");
  EXPECT_EQ(ports.HolderOf(30000), "");
  auto c = ports.Take("c", 1, kAny);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->front(), 30000);
  ports.Release("unknown");  // nothing held: nothing changes
  EXPECT_EQ(ports.held(), 2u);
}

TEST(PortAllocator, NeverTwoHoldersOfOnePort) {
  PortAllocator ports(30000, 30099);
  std::set<int> seen;
  for (int i = 0; i < 100; ++i) {
    auto port = ports.Take("c" + std::to_string(i), 1, kAny);
    ASSERT_TRUE(port) << i;
    EXPECT_TRUE(seen.insert(port->front()).second) << port->front();
  }
  auto none = ports.Take("late", 1, kAny);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().category, ErrorCategory::kUnavailable);
  EXPECT_NE(none.error().message.find("no free host port"), std::string::npos);
}

TEST(PortAllocator, SkipsPortsTheHostHasTaken) {
  PortAllocator ports(30000, 30009);
  std::vector<int> asked;
  auto port = ports.Take("a", 2, [&asked](int p) {
    asked.push_back(p);
    return p != 30000 && p != 30002;
  });
  ASSERT_TRUE(port);
  EXPECT_EQ(*port, (std::vector<int>{30001, 30003}));
  EXPECT_EQ(asked, (std::vector<int>{30000, 30001, 30002, 30003}));
  // A port the host had taken was not given to anyone: free for a later try.
  EXPECT_EQ(ports.HolderOf(30000), "");
}

TEST(PortAllocator, TakesAllOrNothing) {
  PortAllocator ports(30000, 30002);
  ASSERT_TRUE(ports.Take("a", 1, kAny));
  EXPECT_FALSE(ports.Take("b", 3, kAny));
  EXPECT_EQ(ports.held(), 1u);
  EXPECT_EQ(ports.free(), 2u);
}

TEST(PortAllocator, HoldsWhatARestartFinds) {
  PortAllocator ports(30000, 30009);
  EXPECT_TRUE(ports.Hold("running", 30000));
  EXPECT_TRUE(ports.Hold("running", 30000));  // the same holder again
  EXPECT_FALSE(ports.Hold("other", 30000));
  // Out of a range that changed since: held, never handed out again.
  EXPECT_TRUE(ports.Hold("old", 20000));
  auto next = ports.Take("new", 1, kAny);
  ASSERT_TRUE(next);
  EXPECT_EQ(next->front(), 30001);
  ports.Release("old");
  ports.Release("running");
  EXPECT_EQ(ports.free(), 9u);
}

TEST(PortRange, ParsesAndChecksTheFlag) {
  auto range = ParsePortRange("30000-32767");
  ASSERT_TRUE(range);
  EXPECT_EQ(*range, std::make_pair(30000, 32767));
  EXPECT_TRUE(ParsePortRange("1024-1024"));
  for (const char* bad : {"", "30000", "1023-2000", "30000-65536", "32767-30000", "a-b", "-5-10",
                          "30000-", "30000-32767-1", "999999-1000000", " 30000-32767"})
    EXPECT_FALSE(ParsePortRange(bad)) << bad;
  auto low = ParsePortRange("80-90");
  ASSERT_FALSE(low);
  EXPECT_NE(low.error().message.find("--publish-ports 80-90"), std::string::npos);
}

TEST(PortRange, PublishAddressIsAnAddress) {
  EXPECT_TRUE(ParsePublishFlags("127.0.0.1", "30000-30001"));
  EXPECT_TRUE(ParsePublishFlags("::1", "30000-30001"));
  EXPECT_TRUE(ParsePublishFlags("0.0.0.0", "30000-30001"));
  for (const char* bad : {"localhost", "", "127.0.0.1:80", "300.0.0.1"}) {
    auto parsed = ParsePublishFlags(bad, "30000-30001");
    ASSERT_FALSE(parsed) << bad;
    EXPECT_NE(parsed.error().message.find("--publish-address"), std::string::npos);
  }
}

}  // namespace
}  // namespace tessera::serve

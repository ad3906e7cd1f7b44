// The ledger of who holds which partition, and the reconcile plan.
#include <gtest/gtest.h>

#include "fabricmanager/fabricmanager.h"

namespace tessera::fabricmanager {
namespace {

// HGX H100 with module m at bus 0x10*m.
std::shared_ptr<const topology::PartitionPlanner> Planner() {
  topology::PartitionTable table = topology::HgxH100Table();
  for (int m = 1; m <= 8; ++m) {
    char address[16];
    std::snprintf(address, sizeof address, "0000:%02x:00.0", 0x10 * m);
    table.pci_addresses[m] = address;
  }
  return *topology::PartitionPlanner::Create(table);
}

std::string Gpu(int module) {
  char address[16];
  std::snprintf(address, sizeof address, "0000:%02x:00.0", 0x10 * module);
  return address;
}

TEST(PartitionLedger, TheGpuSetMustEqualOnePartition) {
  PartitionLedger ledger(Planner());
  EXPECT_EQ(*ledger.PartitionOf({Gpu(3), Gpu(1)}), 3u);
  EXPECT_EQ(*ledger.PartitionOf({Gpu(5), Gpu(6), Gpu(7), Gpu(8)}), 2u);
  EXPECT_EQ(*ledger.PartitionOf({Gpu(8)}), 14u);
  auto three = ledger.PartitionOf({Gpu(1), Gpu(2), Gpu(3)});
  ASSERT_FALSE(three.ok());
  EXPECT_EQ(three.error().category, ErrorCategory::kFailedPrecondition);
  EXPECT_NE(three.error().message.find("partitions have 1, 2, 4 or 8 GPUs"), std::string::npos)
      << three.error().message;
  auto pair = ledger.PartitionOf({Gpu(1), Gpu(2)});  // a pair, but not a partition's
  ASSERT_FALSE(pair.ok());
  EXPECT_NE(pair.error().message.find("{1,2}"), std::string::npos);
  EXPECT_EQ(ledger.PartitionOf({"0000:99:00.0"}).error().category, ErrorCategory::kInvalidArgument);
}

TEST(PartitionLedger, HoldersShareAPartitionButNeverOverlap) {
  PartitionLedger ledger(Planner());
  EXPECT_FALSE(*ledger.Hold("c1", 3));  // first holder: activate
  EXPECT_TRUE(*ledger.Hold("c1", 3));   // again: nothing to do
  EXPECT_TRUE(*ledger.Hold("c2", 3));   // a second holder of the same partition (MIG slices)
  auto overlap = ledger.Hold("c3", 1);  // {1,2,3,4} overlaps {1,3}
  ASSERT_FALSE(overlap.ok());
  EXPECT_NE(overlap.error().message.find("overlaps partition 3 {1,3}, held by c1"),
            std::string::npos)
      << overlap.error().message;
  EXPECT_FALSE(ledger.Hold("c1", 4).ok());  // one partition per holder
  EXPECT_FALSE(*ledger.Hold("c4", 2));
  EXPECT_EQ(ledger.Held(), (std::vector<uint32_t>{2, 3}));
  EXPECT_EQ(ledger.Release("c1"), std::nullopt);  // c2 still holds 3
  EXPECT_EQ(ledger.Release("c2"), std::optional<uint32_t>(3));
  EXPECT_EQ(ledger.Release("nobody"), std::nullopt);
  EXPECT_EQ(ledger.Held(), (std::vector<uint32_t>{2}));
}

TEST(PartitionLedger, RoundTripsAndRefusesBadFiles) {
  PartitionLedger ledger(Planner());
  ASSERT_TRUE(ledger.Hold("container-a", 5).ok());
  ASSERT_TRUE(ledger.Hold("claim/uid-1", 4).ok());
  auto back = PartitionLedger::Parse(ledger.ToJson(), Planner());
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->holders(), ledger.holders());
  EXPECT_EQ(*LedgerPartitionIds(ledger.ToJson()), (std::vector<uint32_t>{4, 5}));
  for (const char* bad : {"", "[]", "{\"holders\": []}", "{\"holders\": {\"a\": -1}}",
                          "{\"holders\": {\"a\": 99}}", "{\"holders\": {\"a\": 1, \"b\": 3}}",
                          "{\"holders\": {\"\": 1}}", "{\"holders\": {}, \"extra\": 1}"}) {
    EXPECT_FALSE(PartitionLedger::Parse(bad, Planner()).ok()) << bad;
  }
}

TEST(PlanReconcile, DropsEndedHoldersAndMatchesTheFabric) {
  PartitionLedger ledger(Planner());
  ASSERT_TRUE(ledger.Hold("running", 3).ok());
  ASSERT_TRUE(ledger.Hold("ended", 6).ok());
  ASSERT_TRUE(ledger.Hold("lost", 5).ok());  // held, alive, but the fabric forgot it
  // The fabric manager reports 3 and 6 active, plus 4 that someone activated by hand.
  auto plan = PlanReconcile(ledger, {3, 4, 6}, [](const std::string& h) { return h != "ended"; });
  EXPECT_EQ(plan.drop, (std::vector<std::string>{"ended"}));
  EXPECT_EQ(plan.deactivate, (std::vector<uint32_t>{4, 6}));
  EXPECT_EQ(plan.activate, (std::vector<uint32_t>{5}));
  auto nothing = PlanReconcile(ledger, {3, 5, 6}, [](const std::string&) { return true; });
  EXPECT_TRUE(nothing.empty());
}

}  // namespace
}  // namespace tessera::fabricmanager

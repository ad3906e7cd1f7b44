// The node's one owner of partitions, against the stand-in fabric manager: activation by GPU set,
// the ledger on disk, reconcile after a restart of tessera, and the restart watch.
#include <gtest/gtest.h>

#include <thread>

#include "common/atomic_file.h"
#include "fabricmanager/fabricmanager.h"
#include "support/fake_fabric_manager.h"
#include "support/fake_nvml_state.h"
#include "support/fixture_host.h"
#include "support/hostile_files.h"
#include "support/wait.h"

namespace tessera::fabricmanager {
namespace {

using testing::FakeFabricManager;

std::string Gpu(int module) {
  char address[16];
  std::snprintf(address, sizeof address, "0000:%02x:00.0", 0x10 * module);
  return address;
}

topology::PartitionTable Table() {
  topology::PartitionTable table = topology::HgxH100Table();
  for (int m = 1; m <= 8; ++m)
    table.pci_addresses[m] = Gpu(m);
  return table;
}

class Activator : public ::testing::Test {
 protected:
  std::unique_ptr<PartitionActivator> Open(
      std::chrono::milliseconds poll = std::chrono::milliseconds(2000),
      unsigned deadline_ms = kDefaultCallDeadlineMs) {
    ActivatorOptions options;
    options.connect = [deadline_ms] {
      NvfmOptions nvfm;
      nvfm.library = FAKE_NVFM;
      nvfm.timeout_ms = deadline_ms;
      return ConnectNvfm(nvfm);
    };
    options.table = Table();
    options.state_path = ledger_;
    options.poll_interval = poll;
    options.deactivate_retry_for = std::chrono::milliseconds(500);
    auto activator = PartitionActivator::Open(std::move(options));
    EXPECT_TRUE(activator.ok()) << activator.error().message;
    return activator.ok() ? std::move(*activator) : nullptr;
  }

  FakeFabricManager fm_;
  testing::TempDir dir_;
  std::string ledger_ = dir_.path() + "/fabric-partitions.json";
};

TEST_F(Activator, ActivatesThePartitionOfTheGpuSetAndRecordsWhoHoldsIt) {
  auto activator = Open();
  auto pair = activator->Activate("container-a", {Gpu(3), Gpu(1)});
  ASSERT_TRUE(pair.ok()) << pair.error().message;
  EXPECT_EQ(*pair, 3u);
  EXPECT_EQ(fm_.Active(), (std::vector<int>{3}));
  EXPECT_EQ(*ReadWholeFile(ledger_), "{\"holders\":{\"container-a\":3}}\n");
  // Idempotent for the same holder, shared with a second holder of the same GPUs.
  ASSERT_TRUE(activator->Activate("container-a", {Gpu(1), Gpu(3)}).ok());
  ASSERT_TRUE(activator->Activate("slice-b", {Gpu(1), Gpu(3)}).ok());
  EXPECT_EQ(fm_.Succeeded("fmActivateFabricPartition").size(), 1u);
  ASSERT_TRUE(activator->Deactivate("container-a").ok());
  EXPECT_EQ(fm_.Active(), (std::vector<int>{3}));  // slice-b still holds it
  ASSERT_TRUE(activator->Deactivate("slice-b").ok());
  EXPECT_TRUE(fm_.Active().empty());
  ASSERT_TRUE(activator->Deactivate("never-held").ok());
  EXPECT_EQ(activator->stats().activations, 1u);
  EXPECT_EQ(activator->stats().deactivations, 1u);
}

TEST_F(Activator, RefusalsLeaveNothingActiveOrRecorded) {
  auto activator = Open();
  auto three = activator->Activate("c", {Gpu(1), Gpu(2), Gpu(3)});
  ASSERT_FALSE(three.ok());
  EXPECT_NE(three.error().message.find("partitions have 1, 2, 4 or 8 GPUs"), std::string::npos);
  ASSERT_TRUE(activator->Activate("a", {Gpu(5), Gpu(7)}).ok());
  auto overlap = activator->Activate("b", {Gpu(5), Gpu(6), Gpu(7), Gpu(8)});
  ASSERT_FALSE(overlap.ok());
  EXPECT_NE(overlap.error().message.find("overlaps partition 5 {5,7}, held by a"),
            std::string::npos)
      << overlap.error().message;
  // The fabric manager's own refusal, with its reason.
  fm_.Set("fail_activate", "-10");
  auto nvlink = activator->Activate("d", {Gpu(2), Gpu(4)});
  ASSERT_FALSE(nvlink.ok());
  EXPECT_EQ(nvlink.error().message,
            "activate fabric partition 4 {2,4}: fmActivateFabricPartition(4): FM_ST_NVLINK_ERROR "
            "(-10): NVLink training failed for the partition's GPUs");
  EXPECT_EQ(fm_.Active(), (std::vector<int>{5}));
  EXPECT_EQ(activator->HeldBy("d"), std::nullopt);
  EXPECT_EQ(activator->stats().activation_failures, 3u);
}

TEST_F(Activator, APartitionAlreadyActiveForTheHolderIsNoError) {
  fm_.Set("active", "2");  // e.g. activated just before a crash, before the ledger was written
  auto activator = Open();
  ASSERT_TRUE(activator->Activate("c", {Gpu(5), Gpu(6), Gpu(7), Gpu(8)}).ok());
  EXPECT_EQ(activator->HeldBy("c"), std::optional<uint32_t>(2));
}

TEST_F(Activator, ReconcileKeepsWhatRunsAndDeactivatesWhatNothingHolds) {
  {
    auto first = Open();
    ASSERT_TRUE(first->Activate("running", {Gpu(1), Gpu(3)}).ok());
    ASSERT_TRUE(first->Activate("ended", {Gpu(2), Gpu(4)}).ok());
  }  // tessera dies; an operator activates partition 2 by hand meanwhile
  fm_.Set("active", "2 3 4");
  auto second = Open();
  ASSERT_EQ(second->Holders(), (std::vector<std::string>{"ended", "running"}));
  ASSERT_TRUE(second->Reconcile([](const std::string& h) { return h == "running"; }).ok());
  EXPECT_EQ(fm_.Active(), (std::vector<int>{3}));
  EXPECT_EQ(second->Holders(), (std::vector<std::string>{"running"}));
  EXPECT_EQ(*ReadWholeFile(ledger_), "{\"holders\":{\"running\":3}}\n");
  // A held partition the fabric manager lost is activated again.
  fm_.Set("active", "");
  ASSERT_TRUE(second->Reconcile([](const std::string&) { return true; }).ok());
  EXPECT_EQ(fm_.Active(), (std::vector<int>{3}));
}

TEST_F(Activator, TheWatchSendsARestartedFabricManagerTheHeldList) {
  auto activator = Open(std::chrono::milliseconds(100));
  ASSERT_TRUE(activator->Activate("a", {Gpu(6), Gpu(8)}).ok());
  ASSERT_TRUE(activator->Activate("b", {Gpu(1)}).ok());
  activator->StartWatch();
  fm_.Restart();
  ASSERT_TRUE(testing::WaitUntil([&] { return fm_.Get("mode") == "shared"; }))
      << "the active list was never sent";
  EXPECT_EQ(fm_.Active(), (std::vector<int>{6, 7}));
  auto sent = fm_.Succeeded("fmSetActivatedFabricPartitions");
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].argument, "[6,7]");
  ASSERT_TRUE(testing::WaitUntil([&] { return activator->stats().restarts == 1; }));
  EXPECT_GE(activator->stats().last_resend_ms, 0);
  EXPECT_NE(activator->MetricsText().find("tessera_fabric_manager_restarts_total 1\n"),
            std::string::npos)
      << activator->MetricsText();
  // Work goes on over the new connection.
  ASSERT_TRUE(activator->Deactivate("a").ok());
  EXPECT_EQ(fm_.Active(), (std::vector<int>{7}));
}

TEST_F(Activator, ACallThatMeetsARestartSendsTheListItself) {
  auto activator = Open();  // no watch running
  ASSERT_TRUE(activator->Activate("a", {Gpu(2), Gpu(4)}).ok());
  fm_.Restart();
  ASSERT_TRUE(activator->Activate("b", {Gpu(5), Gpu(7)}).ok());
  EXPECT_EQ(fm_.Active(), (std::vector<int>{4, 5}));
  EXPECT_EQ(fm_.Succeeded("fmSetActivatedFabricPartitions").at(0).argument, "[4]");
  EXPECT_EQ(activator->stats().restarts, 1u);
}

TEST_F(Activator, ADeactivationThatCannotReachTheFabricIsRetriedByTheWatch) {
  auto activator = Open();
  ASSERT_TRUE(activator->Activate("a", {Gpu(3)}).ok());
  fm_.Set("mode", "down");
  auto failed = activator->Deactivate("a");
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(activator->HeldBy("a"), std::nullopt);
  EXPECT_EQ(activator->stats().deactivation_failures, 1u);
  fm_.Set("mode", "shared");
  activator->WatchOnce();  // reconnects
  activator->WatchOnce();  // and retries
  EXPECT_TRUE(fm_.Active().empty());
}

TEST(OpenFabric, FirstContactSendsTheLedgerToAWaitingFabricManager) {
  FakeFabricManager fm;
  testing::TempDir dir;
  const std::string ledger = dir.path() + "/ledger.json";
  ASSERT_TRUE(WriteFileAtomically(ledger, "{\"holders\":{\"c\":5}}\n").ok());
  fm.Restart();
  testing::FakeNvmlState nvml("hgx-h100-dgx");
  FabricSetup setup;
  setup.nvfm.library = FAKE_NVFM;
  setup.nvml_library = FAKE_NVML;
  setup.ledger_path = ledger;
  for (const char* gpu : {"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
                          "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"})
    setup.host_gpus.push_back(gpu);
  auto fabric = OpenFabric(std::move(setup));
  ASSERT_TRUE(fabric.ok()) << fabric.error().message;
  EXPECT_EQ(fm.Active(), (std::vector<int>{5}));
  // NVML's module IDs (the fixture's .nvml) place the modules.
  EXPECT_EQ(fabric->table.pci_addresses.at(1), "0000:2a:00.0");
  EXPECT_EQ(fabric->table.pci_addresses.at(3), "0000:18:00.0");
  EXPECT_EQ(fabric->activator->HeldBy("c"), std::optional<uint32_t>(5));
}

TEST(OpenFabric, WithoutNvmlOrTableAddressesItSaysWhatIsMissing) {
  FakeFabricManager fm;
  testing::TempDir dir;
  FabricSetup setup;
  setup.nvfm.library = FAKE_NVFM;
  setup.ledger_path = dir.path() + "/ledger.json";
  setup.host_gpus = {"0000:18:00.0"};
  auto fabric = OpenFabric(std::move(setup));
  ASSERT_FALSE(fabric.ok());
  EXPECT_NE(fabric.error().message.find("fabric manager at 127.0.0.1:6666: GPU modules "
                                        "{1,2,3,4,5,6,7,8} have no PCI address"),
            std::string::npos)
      << fabric.error().message;
}

// An operator's partition table and the ledger another process wrote are files from outside: a
// device, a FIFO or a huge file in their place is refused at once, by name, never read whole.
TEST(OpenFabric, HostileTableAndLedgerFilesAreRefusedByName) {
  FakeFabricManager fm;
  const testing::HostileFiles files(".json");
  for (const auto& file : files.all()) {
    auto table = LoadPartitionTable(file.path);
    ASSERT_FALSE(table.ok()) << file.kind;
    EXPECT_NE(table.error().message.find(file.path), std::string::npos) << table.error().message;
    EXPECT_NE(table.error().message.find(testing::ReasonFor(file)), std::string::npos)
        << file.kind << ": " << table.error().message;

    ActivatorOptions options;
    options.connect = [] {
      NvfmOptions nvfm;
      nvfm.library = FAKE_NVFM;
      return ConnectNvfm(nvfm);
    };
    options.table = Table();
    options.state_path = file.path;
    auto activator = PartitionActivator::Open(std::move(options));
    ASSERT_FALSE(activator.ok()) << file.kind;
    EXPECT_NE(activator.error().message.find(testing::ReasonFor(file)), std::string::npos)
        << file.kind << ": " << activator.error().message;
  }
}

// A fabric manager that takes an activation and never answers: that activation fails at its
// deadline, and the one queued behind it does not wait for the hung call either.
TEST_F(Activator, OneHungActivationHoldsNoOtherBeyondTheDeadline) {
  auto activator = Open(std::chrono::milliseconds(2000), 500);
  fm_.Set("hang", "activate");
  Status first = Ok(), second = Ok();
  std::thread hung([&] {
    auto done = activator->Activate("container-a", {Gpu(1), Gpu(3)});
    if (!done) first = done.error();
  });
  // The second start comes while the first is inside the hung call.
  ASSERT_TRUE(testing::WaitUntil([&] {
    auto calls = fm_.Calls();
    return std::any_of(calls.begin(), calls.end(),
                       [](const auto& call) { return call.argument == "hang"; });
  }));
  auto behind = activator->Activate("container-b", {Gpu(2), Gpu(4)});
  if (!behind) second = behind.error();
  hung.join();
  // Both returned while the fabric manager still hangs: neither waited for it.
  EXPECT_EQ(fm_.Get("hang"), "activate");
  ASSERT_FALSE(first.ok());
  EXPECT_TRUE(IsNoAnswer(first.error())) << first.error().message;
  EXPECT_NE(first.error().message.find("activate fabric partition 3 {1,3}: "
                                       "fmActivateFabricPartition(3): no answer within 500 ms"),
            std::string::npos)
      << first.error().message;
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(IsNoAnswer(second.error())) << second.error().message;
  EXPECT_FALSE(activator->HeldBy("container-a"));
  EXPECT_FALSE(activator->HeldBy("container-b"));
  EXPECT_EQ(activator->stats().activation_failures, 2u);

  // Once it answers again, so does the activator (after one deadline without asking).
  fm_.Set("hang", "none");
  ASSERT_TRUE(testing::WaitUntil([&] {
    return activator->Activate("container-b", {Gpu(2), Gpu(4)}).ok();
  }));
  EXPECT_EQ(fm_.Active(), (std::vector<int>{4}));
}

}  // namespace
}  // namespace tessera::fabricmanager

// Fabric faults as health signals: fmGetNvlinkFailedDevices through the stand-in library and the
// state file, the rule that maps failed devices to GPUs, the watch that hands each new failure
// over once, and the activator's answer to "is this GPU's partition still active".
#include "fabricmanager/fabric_health.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <map>

#include "fabricmanager/fabricmanager.h"
#include "fabricmanager/nvfm_library.h"
#include "support/fake_fabric_manager.h"
#include "support/fixture_host.h"
#include "support/wait.h"

namespace tessera::fabricmanager {
namespace {

using testing::FakeFabricManager;

// Module m at 0000:m0:00.0 (the activator tests' map).
std::string ModuleGpu(int module) {
  char address[16];
  std::snprintf(address, sizeof address, "0000:%02x:00.0", 0x10 * module);
  return address;
}

topology::PartitionTable BoardTable() {
  topology::PartitionTable table = topology::HgxH100Table();
  for (int m = 1; m <= 8; ++m)
    table.pci_addresses[m] = ModuleGpu(m);
  return table;
}

Result<std::unique_ptr<FabricManager>> ConnectFake() {
  NvfmOptions nvfm;
  nvfm.library = FAKE_NVFM;
  return ConnectNvfm(nvfm);
}

TEST(NvlinkFailedDevices, ComeThroughTheLibrary) {
  FakeFabricManager fm;
  auto manager = ConnectFake();
  ASSERT_TRUE(manager.ok()) << manager.error().message;
  auto none = (*manager)->GetNvlinkFailedDevices();
  ASSERT_TRUE(none.ok()) << none.error().message;
  EXPECT_TRUE(none->empty());

  fm.Set("failed_gpus", "00000000:20:00.0=5,4,4");
  fm.Set("failed_switches", "00000000:05:00.0=12,13 00000000:06:00.0");
  auto failed = (*manager)->GetNvlinkFailedDevices();
  ASSERT_TRUE(failed.ok()) << failed.error().message;
  ASSERT_EQ(failed->gpus.size(), 1u);
  EXPECT_EQ(failed->gpus[0].pci_address, "0000:20:00.0");
  EXPECT_EQ(failed->gpus[0].uuid, "DEV-00000000:20:00.0");
  EXPECT_EQ(failed->gpus[0].ports, (std::vector<uint32_t>{4, 5}));  // sorted, each once
  ASSERT_EQ(failed->switches.size(), 2u);
  EXPECT_EQ(failed->switches[0].pci_address, "0000:05:00.0");
  EXPECT_EQ(failed->switches[0].ports, (std::vector<uint32_t>{12, 13}));
  EXPECT_TRUE(failed->switches[1].ports.empty());

  // Restarted and waiting for the active list: no answer but NOT_CONFIGURED.
  fm.Restart();
  auto restarting = (*manager)->GetNvlinkFailedDevices();
  ASSERT_FALSE(restarting.ok());
  EXPECT_EQ(restarting.error().category, ErrorCategory::kUnavailable);
}

TEST(NvlinkFailedDevices, DecodingIsBounded) {
  auto raw = std::make_unique<nvfm::NvlinkFailedDevices>();
  std::memset(raw.get(), 0, sizeof *raw);
  raw->num_gpus = 1;
  std::memcpy(raw->gpu_info[0].pci_bus_id, "not a bus id\x01", 13);
  std::memset(raw->gpu_info[0].uuid, 'u', sizeof raw->gpu_info[0].uuid);  // no NUL
  raw->gpu_info[0].num_ports = 2;
  raw->gpu_info[0].port_num[0] = 7;
  raw->gpu_info[0].port_num[1] = 3;
  auto decoded = DecodeNvlinkFailedDevices(*raw);
  ASSERT_TRUE(decoded.ok()) << decoded.error().message;
  EXPECT_EQ(decoded->gpus[0].pci_address, "");
  EXPECT_EQ(decoded->gpus[0].uuid, std::string(80, 'u'));
  EXPECT_EQ(decoded->gpus[0].ports, (std::vector<uint32_t>{3, 7}));

  raw->gpu_info[0].num_ports = 65;
  EXPECT_EQ(DecodeNvlinkFailedDevices(*raw).error().category, ErrorCategory::kInternal);
  raw->gpu_info[0].num_ports = 0;
  raw->num_switches = 13;
  EXPECT_EQ(DecodeNvlinkFailedDevices(*raw).error().category, ErrorCategory::kInternal);
}

TEST(NvlinkFailedDevices, FromTheStateFileWhichActivationsKeep) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/fabric-state.json";
  std::ofstream(path) << R"({"active": [], "nvlink_failed": {"gpus": [{"pci_address":
      "0000:20:00.0", "ports": [9, 8]}], "switches": [{"pci_address": "0000:05:00.0"}]}})";
  auto manager = OpenFileFabricManager(BoardTable(), path);
  ASSERT_TRUE(manager.ok()) << manager.error().message;
  ASSERT_TRUE((*manager)->Activate(3).ok());
  auto failed = (*manager)->GetNvlinkFailedDevices();
  ASSERT_TRUE(failed.ok()) << failed.error().message;
  ASSERT_EQ(failed->gpus.size(), 1u);
  EXPECT_EQ(failed->gpus[0].ports, (std::vector<uint32_t>{8, 9}));
  ASSERT_EQ(failed->switches.size(), 1u);
  EXPECT_EQ(failed->switches[0].pci_address, "0000:05:00.0");

  std::ofstream(path) << R"({"active": [], "nvlink_failed": {"gpus": [{"pci_address": "x"}]}})";
  auto bad = (*manager)->GetNvlinkFailedDevices();
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().category, ErrorCategory::kInvalidArgument);
  EXPECT_NE(bad.error().message.find("nvlink_failed.gpus[0]"), std::string::npos)
      << bad.error().message;
}

TEST(NvlinkFailedDevices, AnImplementationThatCannotAskSaysSo) {
  struct Minimal : FabricManager {
    Result<std::vector<SupportedPartition>> ListPartitions() override {
      return std::vector<SupportedPartition>{};
    }
    Status Activate(uint32_t) override { return Ok(); }
    Status Deactivate(uint32_t) override { return Ok(); }
    Status SetActivatedPartitions(const std::vector<uint32_t>&) override { return Ok(); }
    std::string Describe() const override { return "minimal"; }
  } minimal;
  auto failed = minimal.GetNvlinkFailedDevices();
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.error().category, ErrorCategory::kUnavailable);
}

TEST(FabricFaults, AFailedGpuImplicatesItselfNamingItsActivePartition) {
  NvlinkFailedDevices failed;
  failed.gpus.push_back({ModuleGpu(3), "", {4, 5}});
  auto list = FabricFaults(failed, BoardTable(), {1}, 1234);
  ASSERT_EQ(list.faults.size(), 1u);
  const health::Signal& signal = list.faults[0].signal;
  EXPECT_EQ(signal.kind, health::SignalKind::kFabricFatal);
  EXPECT_EQ(signal.gpu, "0000:30:00.0");
  EXPECT_EQ(signal.at_ms, 1234);
  EXPECT_EQ(signal.detail, "partition 1: GPU 0000:30:00.0 ports 4,5");
  EXPECT_TRUE(list.unplaced.empty());

  // Same failure, partition gone: same key, so the watch does not report it again.
  auto idle = FabricFaults(failed, BoardTable(), {}, 1234);
  EXPECT_EQ(idle.faults[0].signal.detail, "no active partition: GPU 0000:30:00.0 ports 4,5");
  EXPECT_EQ(idle.faults[0].key, list.faults[0].key);
}

TEST(FabricFaults, AFailedNvSwitchImplicatesEveryGpuOfEveryMultiGpuPartition) {
  NvlinkFailedDevices failed;
  failed.switches.push_back({"0000:05:00.0", "", {12, 13}});
  auto list = FabricFaults(failed, BoardTable(), {3}, 0);  // partition 3: modules {1,3}
  ASSERT_EQ(list.faults.size(), 8u);
  std::map<std::string, std::string> detail;
  for (const auto& fault : list.faults)
    detail[fault.signal.gpu] = fault.signal.detail;
  EXPECT_EQ(detail[ModuleGpu(1)], "partition 3: NVSwitch 0000:05:00.0 ports 12,13");
  EXPECT_EQ(detail[ModuleGpu(3)], "partition 3: NVSwitch 0000:05:00.0 ports 12,13");
  EXPECT_EQ(detail[ModuleGpu(2)], "no active partition: NVSwitch 0000:05:00.0 ports 12,13");

  // A board where module 8 is only ever alone: it uses no NVLink and is left alone.
  topology::PartitionTable table;
  table.board = "test";
  table.module_count = 3;
  table.partitions = {{0, {1, 2}}, {1, {3}}};
  table.pci_addresses = {{1, ModuleGpu(1)}, {2, ModuleGpu(2)}, {3, ModuleGpu(3)}};
  auto spared = FabricFaults(failed, table, {}, 0);
  ASSERT_EQ(spared.faults.size(), 2u);
  EXPECT_EQ(spared.faults[0].signal.gpu, ModuleGpu(1));
  EXPECT_EQ(spared.faults[1].signal.gpu, ModuleGpu(2));
}

TEST(FabricFaults, DetailsAreBoundedAndUnknownGpusAreSetAside) {
  NvlinkFailedDevices failed;
  NvlinkFailedDevice many{ModuleGpu(2), "", {}};
  for (uint32_t p = 0; p < 64; ++p)
    many.ports.push_back(p);
  failed.gpus.push_back(many);
  failed.gpus.push_back({"0000:ee:00.0", "", {1}});
  failed.gpus.push_back({"", std::string(80, 'G'), {1}});
  auto list = FabricFaults(failed, BoardTable(), {}, 0);
  ASSERT_EQ(list.faults.size(), 1u);
  EXPECT_EQ(list.faults[0].signal.detail,
            "no active partition: GPU 0000:20:00.0 ports 0,1,2,3,4,5,6,7 and 56 more");
  ASSERT_EQ(list.unplaced.size(), 2u);
  EXPECT_EQ(list.unplaced[0], "GPU 0000:ee:00.0 port 1");
  for (const auto& text : list.unplaced)
    EXPECT_LE(text.size(), kMaxFaultDetail);
}

class FabricHealth : public ::testing::Test {
 protected:
  std::unique_ptr<FabricHealthWatch> Watch(std::chrono::milliseconds interval) {
    FabricHealthOptions options;
    options.connect = ConnectFake;
    options.table = BoardTable();
    options.interval = interval;
    return std::make_unique<FabricHealthWatch>(std::move(options), [this](health::Signal signal) {
      events_.Add(signal.gpu + " " + signal.detail);
    });
  }

  FakeFabricManager fm_;
  testing::EventLog events_;
};

TEST_F(FabricHealth, EachNewFailureIsHandedOverOnce) {
  auto watch = Watch(std::chrono::seconds(60));
  auto first = watch->PollOnce();
  ASSERT_TRUE(first.ok()) << first.error().message;
  EXPECT_EQ(*first, 0u);

  fm_.Set("active", "1");
  fm_.Set("failed_gpus", "00000000:30:00.0=4");
  EXPECT_EQ(*watch->PollOnce(), 1u);
  EXPECT_EQ(*watch->PollOnce(), 0u);  // still failed: not new
  fm_.Set("failed_gpus", "00000000:30:00.0=4 00000000:40:00.0=1");
  EXPECT_EQ(*watch->PollOnce(), 1u);  // only the GPU that is new
  fm_.Set("failed_gpus", "none");
  EXPECT_EQ(*watch->PollOnce(), 0u);
  fm_.Set("failed_gpus", "00000000:30:00.0=4");
  EXPECT_EQ(*watch->PollOnce(), 1u);  // cleared, then back: new again
  EXPECT_EQ(events_.Events(),
            (std::vector<std::string>{"0000:30:00.0 partition 1: GPU 0000:30:00.0 port 4",
                                      "0000:40:00.0 partition 1: GPU 0000:40:00.0 port 1",
                                      "0000:30:00.0 partition 1: GPU 0000:30:00.0 port 4"}));
}

TEST_F(FabricHealth, ASwitchFailureReachesTheSinkFromTheWatchThread) {
  auto watch = Watch(std::chrono::milliseconds(50));
  watch->Start();
  fm_.Set("failed_switches", "00000000:05:00.0=12,13");
  ASSERT_TRUE(testing::WaitUntil([&] { return events_.Events().size() >= 8; }));
  // The thread has reported them: a poll now finds nothing new.
  EXPECT_EQ(*watch->PollOnce(), 0u);
  watch.reset();  // stops and joins
  EXPECT_EQ(events_.Events().size(), 8u);
}

TEST_F(FabricHealth, AFabricManagerThatRestartsIsAskedAgainOnAFreshConnection) {
  auto watch = Watch(std::chrono::seconds(60));
  ASSERT_TRUE(watch->PollOnce().ok());
  fm_.Restart();
  auto refused = watch->PollOnce();
  ASSERT_FALSE(refused.ok());
  fm_.Set("mode", "shared");
  fm_.Set("failed_gpus", "00000000:10:00.0=0");
  auto again = watch->PollOnce();
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_EQ(*again, 1u);
}

TEST(PartitionHolds, AGpuIsHeldUntilItsPartitionIsDeactivated) {
  FakeFabricManager fm;
  testing::TempDir dir;
  ActivatorOptions options;
  options.connect = ConnectFake;
  options.table = BoardTable();
  options.state_path = dir.path() + "/fabric-partitions.json";
  auto activator = PartitionActivator::Open(std::move(options));
  ASSERT_TRUE(activator.ok()) << activator.error().message;
  EXPECT_FALSE((*activator)->HoldsAnyOf({ModuleGpu(1)}));
  ASSERT_TRUE((*activator)->Activate("c1", {ModuleGpu(1), ModuleGpu(3)}).ok());
  EXPECT_TRUE((*activator)->HoldsAnyOf({ModuleGpu(3)}));
  EXPECT_TRUE((*activator)->HoldsAnyOf({ModuleGpu(8), ModuleGpu(1)}));
  EXPECT_FALSE((*activator)->HoldsAnyOf({ModuleGpu(2), ModuleGpu(4)}));
  EXPECT_FALSE((*activator)->HoldsAnyOf({"0000:ee:00.0"}));
  ASSERT_TRUE((*activator)->Deactivate("c1").ok());
  EXPECT_FALSE((*activator)->HoldsAnyOf({ModuleGpu(1), ModuleGpu(3)}));

  // Released, but the fabric manager refuses the deactivation: still held until the watch's
  // retry goes through.
  ASSERT_TRUE((*activator)->Activate("c2", {ModuleGpu(2), ModuleGpu(4)}).ok());
  fm.Set("mode", "not-shared");
  EXPECT_FALSE((*activator)->Deactivate("c2").ok());
  EXPECT_FALSE((*activator)->HeldBy("c2"));
  EXPECT_TRUE((*activator)->HoldsAnyOf({ModuleGpu(4)}));
  fm.Set("mode", "shared");
  (*activator)->WatchOnce();
  EXPECT_FALSE((*activator)->HoldsAnyOf({ModuleGpu(4)}));
  EXPECT_EQ(fm.Active(), std::vector<int>{});
}

}  // namespace
}  // namespace tessera::fabricmanager

// MIG devices in the inventory: capability minors from the fixture's procfs, everything else
// from the stand-in NVML (tests/deviceplugin/fake_nvml_mig.c) loaded with dlopen as the real
// library would be.
#include <gtest/gtest.h>

#include <filesystem>

#include "inventory/inventory.h"
#include "inventory/parsers.h"
#include "inventory/readers.h"
#include "support/fake_nvml_state.h"
#include "support/fixture_host.h"

namespace tessera::inventory {
namespace {

using testing::FakeNvmlState;

Inventory Read(const std::string& fixture, const std::string& nvml) {
  ReadOptions options;
  options.root = testing::MaterializeHost(fixture);
  options.nvml_library = nvml;
  auto inventory = ReadInventory(options);
  EXPECT_TRUE(inventory.ok());
  return inventory.ok() ? *inventory : Inventory{};
}

std::string AllWarnings(const Inventory& inv) {
  std::string all;
  for (const auto& w : inv.warnings)
    all += w + "\n";
  for (const auto& d : inv.devices)
    for (const auto& w : d.warnings)
      all += d.pci_address + ": " + w + "\n";
  return all;
}

TEST(MigInventory, H100WithSevenOneSliceDevicesFromProcfsAndNvml) {
  FakeNvmlState nvml("h100-mig-1g");
  Inventory inv = Read("h100-mig-1g", FAKE_NVML);
  EXPECT_EQ(AllWarnings(inv), "");
  const PciDevice* gpu = inv.FindDevice("0000:18:00.0");
  ASSERT_NE(gpu, nullptr);
  ASSERT_TRUE(gpu->mig.has_value());
  EXPECT_EQ(gpu->mig->enabled, true);
  EXPECT_EQ(gpu->mig->pending, true);
  ASSERT_EQ(gpu->mig->devices.size(), 7u);
  for (uint32_t i = 0; i < 7; ++i) {
    const MigDevice& m = gpu->mig->devices[i];
    EXPECT_EQ(m.index, i);
    EXPECT_EQ(m.gpu_instance_id, 7 + i);
    EXPECT_EQ(m.compute_instance_id, 0u);
    EXPECT_EQ(m.profile, "1g.10gb");
    EXPECT_EQ(m.profile_id, 19u);
    EXPECT_EQ(m.placement, (MigPlacement{i, 1}));
    EXPECT_EQ(m.uuid.rfind("MIG-", 0), 0u) << m.uuid;
    EXPECT_EQ(m.memory_bytes, 9856ull << 20);
    EXPECT_EQ(m.multiprocessors, 16u);
    ASSERT_TRUE(m.gpu_instance_node && m.compute_instance_node);
    uint32_t gi_minor = 3 + (7 + i) * 9;  // the driver's numbering for GPU minor 0
    EXPECT_EQ(m.gpu_instance_node->path, "/dev/nvidia-caps/nvidia-cap" + std::to_string(gi_minor));
    EXPECT_EQ(m.gpu_instance_node->major, 509u);
    EXPECT_EQ(m.gpu_instance_node->minor, gi_minor);
    EXPECT_TRUE(m.gpu_instance_node->exists);
    EXPECT_EQ(m.compute_instance_node->minor, gi_minor + 1);
    EXPECT_TRUE(m.compute_instance_node->exists);
  }
}

TEST(MigInventory, MixedLayoutNamesEachProfileWithItsPlacement) {
  FakeNvmlState nvml("h100-mig-mixed");
  Inventory inv = Read("h100-mig-mixed", FAKE_NVML);
  EXPECT_EQ(AllWarnings(inv), "");
  const PciDevice* gpu = inv.FindDevice("0000:18:00.0");
  ASSERT_NE(gpu, nullptr);
  ASSERT_TRUE(gpu->mig);
  ASSERT_EQ(gpu->mig->devices.size(), 3u);
  const auto& d = gpu->mig->devices;
  EXPECT_EQ(d[0].profile, "3g.40gb");
  EXPECT_EQ(d[0].profile_id, 9u);
  EXPECT_EQ(d[0].placement, (MigPlacement{0, 4}));
  EXPECT_EQ(d[0].multiprocessors, 60u);
  EXPECT_EQ(d[1].profile, "2g.20gb");
  EXPECT_EQ(d[1].profile_id, 14u);
  EXPECT_EQ(d[1].placement, (MigPlacement{4, 2}));
  EXPECT_EQ(d[2].profile, "1g.10gb");
  EXPECT_EQ(d[2].placement, (MigPlacement{6, 1}));
  // The second H100 supports MIG but has it off: reported, with no devices.
  const PciDevice* whole = inv.FindDevice("0000:2a:00.0");
  ASSERT_NE(whole, nullptr);
  ASSERT_TRUE(whole->mig);
  EXPECT_EQ(whole->mig->enabled, false);
  EXPECT_TRUE(whole->mig->devices.empty());
}

TEST(MigInventory, A100ProfilesComeFromItsOwnTable) {
  FakeNvmlState nvml("a100-mig");
  Inventory inv = Read("a100-mig", FAKE_NVML);
  EXPECT_EQ(AllWarnings(inv), "");
  const PciDevice* gpu = inv.FindDevice("0000:07:00.0");
  ASSERT_NE(gpu, nullptr);
  EXPECT_EQ(gpu->model, "GA100 [A100 SXM4 40GB]");
  ASSERT_TRUE(gpu->mig);
  ASSERT_EQ(gpu->mig->devices.size(), 3u);
  EXPECT_EQ(gpu->mig->devices[0].profile, "3g.20gb");
  EXPECT_EQ(gpu->mig->devices[0].memory_bytes, 19968ull << 20);
  EXPECT_EQ(gpu->mig->devices[1].profile, "2g.10gb");
  EXPECT_EQ(gpu->mig->devices[2].placement, (MigPlacement{2, 2}));
}

TEST(MigInventory, WithoutNvmlProcfsFactsRemainAndAWarningNamesWhatIsMissing) {
  Inventory inv = Read("h100-mig-mixed", "");
  const PciDevice* gpu = inv.FindDevice("0000:18:00.0");
  ASSERT_NE(gpu, nullptr);
  ASSERT_TRUE(gpu->mig);
  EXPECT_FALSE(gpu->mig->enabled.has_value());
  ASSERT_EQ(gpu->mig->devices.size(), 3u);
  EXPECT_EQ(gpu->mig->devices[1].gpu_instance_id, 5u);
  EXPECT_EQ(gpu->mig->devices[1].profile, "");
  EXPECT_FALSE(gpu->mig->devices[1].placement);
  EXPECT_EQ(gpu->mig->devices[1].gpu_instance_node->minor, 3u + 5 * 9);
  ASSERT_EQ(gpu->warnings.size(), 1u);
  EXPECT_NE(gpu->warnings[0].find("profiles"), std::string::npos) << gpu->warnings[0];
  EXPECT_NE(gpu->warnings[0].find("UUIDs"), std::string::npos) << gpu->warnings[0];
  // Without NVML and without MIG instances nothing is known, so nothing is claimed.
  EXPECT_FALSE(inv.FindDevice("0000:2a:00.0")->mig);
  EXPECT_TRUE(inv.FindDevice("0000:2a:00.0")->warnings.empty());
}

TEST(MigInventory, AnNvmlThatCannotBeLoadedIsNamedInTheWarning) {
  Inventory inv = Read("h100-mig-1g", "/nonexistent/libnvidia-ml.so.1");
  const PciDevice* gpu = inv.FindDevice("0000:18:00.0");
  ASSERT_TRUE(gpu && gpu->mig);
  EXPECT_EQ(gpu->mig->devices.size(), 7u);
  ASSERT_EQ(gpu->warnings.size(), 1u);
  EXPECT_NE(gpu->warnings[0].find("/nonexistent/libnvidia-ml.so.1"), std::string::npos);
}

TEST(MigInventory, AnNvmlErrorKeepsTheProcfsFactsAndNamesTheFailingCall) {
  FakeNvmlState nvml("h100-mig-1g");
  nvml.Append("fail nvmlDeviceGetUUID 15");  // NVML_ERROR_GPU_IS_LOST
  Inventory inv = Read("h100-mig-1g", FAKE_NVML);
  const PciDevice* gpu = inv.FindDevice("0000:18:00.0");
  ASSERT_TRUE(gpu && gpu->mig);
  EXPECT_EQ(gpu->mig->devices.size(), 7u);
  EXPECT_TRUE(gpu->mig->devices[0].gpu_instance_node);
  ASSERT_FALSE(gpu->warnings.empty());
  EXPECT_NE(gpu->warnings[0].find("nvmlDeviceGetUUID"), std::string::npos) << gpu->warnings[0];
}

TEST(MigInventory, GpusWithoutMigSupportGetNoMigEntryAndNoWarning) {
  FakeNvmlState nvml("");  // NVML knows the GPUs only as plain devices
  Inventory inv = Read("hgx-h100-dgx", FAKE_NVML);
  for (const auto& d : inv.devices) {
    EXPECT_FALSE(d.mig) << d.pci_address;
    EXPECT_TRUE(d.warnings.empty()) << d.pci_address << ": " << d.warnings.front();
  }
}

// The driver creates capabilities/gpu<minor>/mig for every GPU it attaches, MIG or not, so a
// host without MIG shows that directory empty; NVML (whose start attaches every GPU) stays shut.
TEST(MigInventory, NvmlIsNotStartedOnAHostWithoutMigCapableGpus) {
  FakeNvmlState nvml("");
  testing::TempHost host("workstation-intel-nvidia");  // GeForce RTX 4090, 10de:2684
  std::filesystem::create_directories(host.root() + "/proc/driver/nvidia/capabilities/gpu0/mig");
  ReadOptions options;
  options.root = host.root();
  options.nvml_library = FAKE_NVML;
  auto inv = ReadInventory(options);
  ASSERT_TRUE(inv.ok());
  EXPECT_EQ(nvml.Inits(), 0u);
  const PciDevice* gpu = inv->FindDevice("0000:01:00.0");
  ASSERT_NE(gpu, nullptr);
  EXPECT_FALSE(gpu->mig);
  EXPECT_TRUE(gpu->warnings.empty()) << gpu->warnings.front();
}

TEST(MigInventory, NvmlIsStartedOnceForAHostWithMigInstances) {
  FakeNvmlState nvml("h100-mig-1g");
  Inventory inv = Read("h100-mig-1g", FAKE_NVML);
  EXPECT_EQ(nvml.Inits(), 1u);
  const PciDevice* gpu = inv.FindDevice("0000:18:00.0");
  ASSERT_TRUE(gpu && gpu->mig);
  ASSERT_EQ(gpu->mig->devices.size(), 7u);
  EXPECT_EQ(gpu->mig->devices[0].uuid.rfind("MIG-", 0), 0u);  // a fact only NVML gives
}

// MIG may be on (or pending) on a MIG-capable board before any instance exists, and only NVML
// can say so: such a board is asked even with no instance in procfs.
TEST(MigInventory, AMigCapableBoardWithoutInstancesIsStillAskedForItsMode) {
  FakeNvmlState nvml("");
  testing::TempHost host("hgx-h100-dgx");  // H100 SXM5, 10de:2330
  std::filesystem::create_directories(host.root() + "/proc/driver/nvidia/capabilities/gpu0/mig");
  ReadOptions options;
  options.root = host.root();
  options.nvml_library = FAKE_NVML;
  ASSERT_TRUE(ReadInventory(options).ok());
  EXPECT_EQ(nvml.Inits(), 1u);
}

TEST(MigCapableBoard, KnowsTheChipsWithMig) {
  EXPECT_TRUE(MigCapableBoard(0x20b0));   // A100 SXM4 40GB
  EXPECT_TRUE(MigCapableBoard(0x20b7));   // A30
  EXPECT_TRUE(MigCapableBoard(0x2330));   // H100 SXM5
  EXPECT_TRUE(MigCapableBoard(0x2335));   // H200
  EXPECT_TRUE(MigCapableBoard(0x2901));   // B200
  EXPECT_FALSE(MigCapableBoard(0x2684));  // GeForce RTX 4090
  EXPECT_FALSE(MigCapableBoard(0x26b5));  // L40
  EXPECT_FALSE(MigCapableBoard(0x27b8));  // L4
  EXPECT_FALSE(MigCapableBoard(0x1db4));  // V100
}

TEST(MigInventory, JsonCarriesEveryMigFieldAndReadsBack) {
  FakeNvmlState nvml("h100-mig-mixed");
  Inventory inv = Read("h100-mig-mixed", FAKE_NVML);
  std::string json = ToJson(inv);
  EXPECT_NE(json.find("\"profile\": \"2g.20gb\""), std::string::npos);
  EXPECT_NE(json.find("\"mode\": \"enabled\""), std::string::npos);
  auto back = FromJson(json);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(ToJson(*back), json);
  const MigDevice& m = back->FindDevice("0000:18:00.0")->mig->devices[1];
  EXPECT_EQ(m.placement, (MigPlacement{4, 2}));
  EXPECT_EQ(m.compute_instance_node->path, "/dev/nvidia-caps/nvidia-cap49");
}

TEST(MigInventory, JsonWithoutAMigFieldStillReads) {
  Inventory inv = Read("workstation-intel-nvidia", "");
  std::string json = ToJson(inv);
  auto at = json.find("\"mig\": null,");
  ASSERT_NE(at, std::string::npos);
  json.erase(at, std::string("\"mig\": null,").size());
  EXPECT_TRUE(FromJson(json).ok());
}

TEST(MigCapabilities, PairsComputeInstancesWithTheirGpuInstance) {
  std::vector<std::string> warnings;
  auto minors = ParseMigCapabilities(
      {{"gi1/access", "DeviceFileMinor: 12\nDeviceFileMode: 292\nDeviceFileModify: 1\n"},
       {"gi1/ci0/access", "DeviceFileMinor: 13\nDeviceFileMode: 292\n"},
       {"gi1/ci1/access", "DeviceFileMinor: 14\n"},
       {"gi2/access", "DeviceFileMinor: 21\n"}},  // a GPU instance with no compute instance yet
      warnings);
  EXPECT_TRUE(warnings.empty());
  ASSERT_EQ(minors.size(), 2u);
  EXPECT_EQ(minors[0].gpu_instance_minor, 12u);
  EXPECT_EQ(minors[0].compute_instance_minor, 13u);
  EXPECT_EQ(minors[1].compute_instance_id, 1u);
  EXPECT_EQ(minors[1].compute_instance_minor, 14u);
}

TEST(MigCapabilities, BadFilesBecomeWarningsNamingThem) {
  std::vector<std::string> warnings;
  auto minors = ParseMigCapabilities({{"gi1/access", "DeviceFileMinor: twelve\n"},
                                      {"gi1/ci0/access", "DeviceFileMinor: 13\n"},
                                      {"gi3/ci0/access", "DeviceFileMinor: 31\n"},
                                      {"../../etc/access", "DeviceFileMinor: 1\n"},
                                      {"gi4/access", "DeviceFileMinor: 1\n"},
                                      {"gi4/access", "DeviceFileMinor: 2\n"}},
                                     warnings);
  EXPECT_TRUE(minors.empty());
  ASSERT_EQ(warnings.size(), 5u);
  EXPECT_NE(warnings[0].find("mig/gi1/access"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[1].find("not a gi<g>/access"), std::string::npos) << warnings[1];
  EXPECT_NE(warnings[2].find("listed twice"), std::string::npos) << warnings[2];
}

TEST(MigCapabilities, InstanceNamesAreBoundedDecimals) {
  EXPECT_EQ(ParseMigInstanceName("gi13", "gi"), 13u);
  EXPECT_EQ(ParseMigInstanceName("ci0", "ci"), 0u);
  EXPECT_FALSE(ParseMigInstanceName("gi", "gi"));
  EXPECT_FALSE(ParseMigInstanceName("gi01", "gi"));
  EXPECT_FALSE(ParseMigInstanceName("gi1x", "gi"));
  EXPECT_FALSE(ParseMigInstanceName("gi1024", "gi"));
  EXPECT_FALSE(ParseMigInstanceName("ci3", "gi"));
}

}  // namespace
}  // namespace tessera::inventory

// Runs the inventory on every fixture host and checks each field the schema promises.
#include <gtest/gtest.h>

#include <algorithm>

#include "inventory/inventory.h"
#include "inventory/inventory_at.h"
#include "support/fixture_host.h"

namespace tessera::inventory {
namespace {

const SharedDeviceNode* FindShared(const Inventory& inventory, const std::string& role) {
  for (const auto& node : inventory.shared_device_nodes) {
    if (node.role == role) return &node;
  }
  return nullptr;
}

size_t CountKind(const Inventory& inventory, DeviceKind kind) {
  return std::count_if(inventory.devices.begin(), inventory.devices.end(),
                       [&](const PciDevice& d) { return d.kind == kind; });
}

TEST(HgxDgxHost, ListsEightH100sAndFourNvSwitches) {
  Inventory inv = InventoryAt(testing::MaterializeHost("hgx-h100-dgx"));
  EXPECT_EQ(CountKind(inv, DeviceKind::kGpu), 8u);
  EXPECT_EQ(CountKind(inv, DeviceKind::kNvSwitch), 4u);
  EXPECT_EQ(CountKind(inv, DeviceKind::kCompanion), 0u);
  EXPECT_EQ(inv.devices.size(), 12u);  // bridges and the host bridge are not listed
  EXPECT_TRUE(inv.warnings.empty()) << inv.warnings.front();
  for (const auto& d : inv.devices)
    EXPECT_TRUE(d.warnings.empty()) << d.pci_address << ": " << d.warnings.front();
}

TEST(HgxDgxHost, ReadsEveryFieldOfTheFirstGpu) {
  Inventory inv = InventoryAt(testing::MaterializeHost("hgx-h100-dgx"));
  const PciDevice* gpu = inv.FindDevice("0000:18:00.0");
  ASSERT_NE(gpu, nullptr);
  EXPECT_EQ(gpu->vendor_id, 0x10de);
  EXPECT_EQ(gpu->device_id, 0x2330);
  EXPECT_EQ(gpu->subsystem_vendor_id, 0x10de);
  EXPECT_EQ(gpu->subsystem_device_id, 0x16c1);
  EXPECT_EQ(gpu->class_code, 0x030200u);
  EXPECT_EQ(gpu->revision, 0xa1);
  EXPECT_EQ(gpu->kind, DeviceKind::kGpu);
  EXPECT_EQ(gpu->vendor_name, "NVIDIA Corporation");
  EXPECT_EQ(gpu->model, "GH100 [H100 SXM5 80GB]");
  EXPECT_EQ(gpu->driver, "nvidia");
  ASSERT_TRUE(gpu->iommu_group.has_value());
  EXPECT_EQ(inv.iommu_groups.at(*gpu->iommu_group).members,
            std::vector<std::string>{"0000:18:00.0"});
  EXPECT_EQ(gpu->numa_node, 0);
  ASSERT_EQ(gpu->bars.size(), 3u);
  EXPECT_EQ(gpu->bars[0].index, 0);
  EXPECT_EQ(gpu->bars[0].size, 16u << 20);
  EXPECT_EQ(gpu->bars[1].index, 2);
  EXPECT_EQ(gpu->bars[1].size, uint64_t{128} << 30);
  EXPECT_EQ(gpu->bars[2].size, 32u << 20);
  ASSERT_TRUE(gpu->link.has_value());
  EXPECT_EQ(gpu->link->current_speed, "32.0 GT/s PCIe");
  EXPECT_EQ(gpu->link->current_width, 16);
  EXPECT_EQ(gpu->upstream_bridges,
            (std::vector<std::string>{"0000:17:00.0", "0000:16:00.0", "0000:15:01.0"}));
  ASSERT_EQ(gpu->device_nodes.size(), 1u);
  EXPECT_EQ(gpu->device_nodes[0].path, "/dev/nvidia0");
  EXPECT_EQ(gpu->device_nodes[0].major, 195u);
  EXPECT_EQ(gpu->device_nodes[0].minor, 0u);
  EXPECT_TRUE(gpu->device_nodes[0].exists);
  EXPECT_EQ(*gpu->nvidia_minor, 0);
  EXPECT_EQ(*gpu->gpu_uuid, "GPU-5e4b7c10-3c2a-4d8e-9f10-a1b2c3d4e5f0");
}

TEST(HgxDgxHost, GpusOnOneSwitchShareTheirUpstreamChainAndNumaSplitsBySocket) {
  Inventory inv = InventoryAt(testing::MaterializeHost("hgx-h100-dgx"));
  const PciDevice* a = inv.FindDevice("0000:18:00.0");
  const PciDevice* b = inv.FindDevice("0000:2a:00.0");
  const PciDevice* c = inv.FindDevice("0000:9a:00.0");
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(a->upstream_bridges[1], b->upstream_bridges[1]);  // same switch upstream port
  EXPECT_NE(a->upstream_bridges[0], b->upstream_bridges[0]);  // different downstream ports
  EXPECT_EQ(c->numa_node, 1);
  EXPECT_EQ(*c->nvidia_minor, 4);
  EXPECT_EQ(c->device_nodes[0].path, "/dev/nvidia4");
}

TEST(HgxDgxHost, NvSwitchesHaveOwnGroupsAndDriver) {
  Inventory inv = InventoryAt(testing::MaterializeHost("hgx-h100-dgx"));
  const PciDevice* sw = inv.FindDevice("0000:05:00.0");
  ASSERT_NE(sw, nullptr);
  EXPECT_EQ(sw->kind, DeviceKind::kNvSwitch);
  EXPECT_EQ(sw->driver, "nvidia-nvswitch");
  EXPECT_EQ(sw->model, "GH100 [H100 NVSwitch]");
  EXPECT_EQ(inv.iommu_groups.at(*sw->iommu_group).members.size(), 1u);
}

TEST(HgxDgxHost, SharedNvidiaNodesComeFromProcDevices) {
  Inventory inv = InventoryAt(testing::MaterializeHost("hgx-h100-dgx"));
  const auto* ctl = FindShared(inv, "nvidiactl");
  ASSERT_NE(ctl, nullptr);
  EXPECT_EQ(ctl->node.path, "/dev/nvidiactl");
  EXPECT_EQ(ctl->node.major, 195u);
  EXPECT_EQ(ctl->node.minor, 255u);
  const auto* uvm = FindShared(inv, "nvidia-uvm");
  ASSERT_NE(uvm, nullptr);
  EXPECT_EQ(uvm->node.major, 510u);
  const auto* tools = FindShared(inv, "nvidia-uvm-tools");
  ASSERT_NE(tools, nullptr);
  EXPECT_EQ(tools->node.minor, 1u);
  EXPECT_TRUE(tools->node.exists);
  // nvidia_modeset is not loaded on this compute node.
  EXPECT_EQ(FindShared(inv, "nvidia-modeset"), nullptr);
}

TEST(HgxDgxHost, FindsDriverLibrariesBinariesFirmwareAndSockets) {
  Inventory inv = InventoryAt(testing::MaterializeHost("hgx-h100-dgx"));
  ASSERT_TRUE(inv.nvidia_driver.has_value());
  const NvidiaDriver& driver = *inv.nvidia_driver;
  EXPECT_EQ(driver.version, "580.65.06");
  EXPECT_EQ(driver.libraries.size(), 14u);
  auto cuda = std::find_if(driver.libraries.begin(), driver.libraries.end(),
                           [](const DriverLibrary& l) { return l.soname == "libcuda.so.1"; });
  ASSERT_NE(cuda, driver.libraries.end());
  EXPECT_EQ(cuda->path, "/usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06");
  EXPECT_EQ(cuda->soname_link, "/usr/lib/x86_64-linux-gnu/libcuda.so.1");
  EXPECT_EQ(cuda->arch, "x86_64");
  for (const auto& library : driver.libraries) {
    EXPECT_EQ(library.path.find("egl-wayland"), std::string::npos) << "not a driver-version file";
  }
  EXPECT_EQ(driver.binaries.size(), 5u);
  EXPECT_EQ(driver.binaries.front(), "/usr/bin/nvidia-smi");
  // /lib → /usr/lib: the firmware is listed once, not twice.
  EXPECT_EQ(driver.firmware.size(), 2u);
  EXPECT_EQ(driver.firmware[0], "/lib/firmware/nvidia/580.65.06/gsp_ga10x.bin");
  EXPECT_EQ(driver.ipc_sockets, (std::vector<std::string>{"/run/nvidia-persistenced/socket",
                                                          "/run/nvidia-fabricmanager/socket"}));
}

TEST(HgxVfioHost, NvSwitchesAndMemoryControllerShareOneGroup) {
  Inventory inv = InventoryAt(testing::MaterializeHost("hgx-h100-vfio"));
  EXPECT_EQ(CountKind(inv, DeviceKind::kGpu), 8u);
  EXPECT_EQ(CountKind(inv, DeviceKind::kNvSwitch), 4u);
  ASSERT_EQ(CountKind(inv, DeviceKind::kCompanion), 1u);
  const PciDevice* companion = inv.FindDevice("0000:03:00.1");
  ASSERT_NE(companion, nullptr);
  EXPECT_EQ(companion->kind, DeviceKind::kCompanion);
  EXPECT_EQ(companion->vendor_id, 0x11f8);
  EXPECT_EQ(companion->device_id, 0x4128);
  EXPECT_EQ(inv.iommu_groups.at(4).members,
            (std::vector<std::string>{"0000:03:00.1", "0000:05:00.0", "0000:06:00.0",
                                      "0000:07:00.0", "0000:08:00.0"}));
  EXPECT_FALSE(inv.nvidia_driver.has_value());
  EXPECT_TRUE(inv.warnings.empty());
}

TEST(HgxVfioHost, VfioGroupAndIommufdNodesUseKernelNumbers) {
  Inventory inv = InventoryAt(testing::MaterializeHost("hgx-h100-vfio"));
  const PciDevice* gpu = inv.FindDevice("0000:18:00.0");
  ASSERT_NE(gpu, nullptr);
  EXPECT_EQ(gpu->driver, "vfio-pci");
  ASSERT_EQ(gpu->device_nodes.size(), 2u);
  EXPECT_EQ(gpu->device_nodes[0].path, "/dev/vfio/" + std::to_string(*gpu->iommu_group));
  EXPECT_EQ(gpu->device_nodes[0].major, 508u);
  EXPECT_EQ(gpu->device_nodes[1].path, "/dev/vfio/devices/vfio0");
  EXPECT_EQ(gpu->device_nodes[1].major, 507u);
  const auto* vfio = FindShared(inv, "vfio");
  ASSERT_NE(vfio, nullptr);
  EXPECT_EQ(vfio->node.path, "/dev/vfio/vfio");
  EXPECT_EQ(vfio->node.major, 10u);
  EXPECT_EQ(vfio->node.minor, 196u);
  const auto* iommufd = FindShared(inv, "iommufd");
  ASSERT_NE(iommufd, nullptr);
  EXPECT_EQ(iommufd->node.path, "/dev/iommu");
}

TEST(WorkstationHost, MatchesDrmNodesToTheirPciDevices) {
  Inventory inv = InventoryAt(testing::MaterializeHost("workstation-intel-nvidia"));
  ASSERT_EQ(inv.devices.size(), 2u);
  const PciDevice* igpu = inv.FindDevice("0000:00:02.0");
  const PciDevice* dgpu = inv.FindDevice("0000:01:00.0");
  ASSERT_TRUE(igpu && dgpu);
  EXPECT_EQ(igpu->driver, "i915");
  EXPECT_EQ(igpu->class_code, 0x030000u);
  ASSERT_EQ(igpu->device_nodes.size(), 2u);
  EXPECT_EQ(igpu->device_nodes[0].path, "/dev/dri/card0");
  EXPECT_EQ(igpu->device_nodes[0].major, 226u);
  EXPECT_EQ(igpu->device_nodes[1].path, "/dev/dri/renderD128");
  EXPECT_EQ(igpu->device_nodes[1].minor, 128u);
  ASSERT_EQ(dgpu->device_nodes.size(), 3u);
  EXPECT_EQ(dgpu->device_nodes[0].path, "/dev/dri/card1");
  EXPECT_EQ(dgpu->device_nodes[1].path, "/dev/dri/renderD129");
  EXPECT_EQ(dgpu->device_nodes[2].path, "/dev/nvidia0");
  // The dGPU's group also holds its audio function and root port's peers: all are listed.
  EXPECT_EQ(inv.iommu_groups.at(1).members,
            (std::vector<std::string>{"0000:00:01.0", "0000:01:00.0", "0000:01:00.1"}));
  EXPECT_EQ(dgpu->numa_node, -1);
  EXPECT_NE(FindShared(inv, "nvidia-modeset"), nullptr);
  EXPECT_EQ(dgpu->bars.back().index, 6);  // expansion ROM
}

TEST(AmdHost, ListsGpuWithRenderNodesAndKfd) {
  Inventory inv = InventoryAt(testing::MaterializeHost("amd-gpu"));
  ASSERT_EQ(inv.devices.size(), 1u);
  const PciDevice& gpu = inv.devices[0];
  EXPECT_EQ(gpu.pci_address, "0000:03:00.0");
  EXPECT_EQ(gpu.driver, "amdgpu");
  EXPECT_EQ(gpu.model, "Navi 31 [Radeon RX 7900 XT/7900 XTX]");
  EXPECT_EQ(gpu.upstream_bridges,
            (std::vector<std::string>{"0000:02:00.0", "0000:01:00.0", "0000:00:01.1"}));
  ASSERT_EQ(gpu.device_nodes.size(), 2u);
  EXPECT_EQ(gpu.device_nodes[1].path, "/dev/dri/renderD128");
  const auto* kfd = FindShared(inv, "kfd");
  ASSERT_NE(kfd, nullptr);
  EXPECT_EQ(kfd->node.path, "/dev/kfd");
  EXPECT_EQ(kfd->node.major, 235u);
  EXPECT_FALSE(inv.nvidia_driver.has_value());
}

TEST(NoGpuHost, IsEmptyAndQuiet) {
  Inventory inv = InventoryAt(testing::MaterializeHost("no-gpu"));
  EXPECT_TRUE(inv.devices.empty());
  EXPECT_TRUE(inv.iommu_groups.empty());
  EXPECT_TRUE(inv.shared_device_nodes.empty());
  EXPECT_FALSE(inv.nvidia_driver.has_value());
  EXPECT_TRUE(inv.warnings.empty());
}

TEST(RealHost, ThisMachineHasNoGpusAndNoWarnings) {
  Inventory inv = InventoryAt("/");
  EXPECT_TRUE(inv.devices.empty());
  EXPECT_TRUE(inv.warnings.empty()) << inv.warnings.front();
}

TEST(ReadInventory, RejectsARootThatIsNotADirectory) {
  ReadOptions options;
  options.root = "/nonexistent/tessera-root";
  auto inv = ReadInventory(options);
  ASSERT_FALSE(inv.ok());
  EXPECT_NE(inv.error().message.find("/nonexistent/tessera-root"), std::string::npos);
}

}  // namespace
}  // namespace tessera::inventory

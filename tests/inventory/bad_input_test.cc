// Partial or broken hosts: every problem becomes a warning that names the file, never a crash
// and never a silently wrong value.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "inventory/inventory.h"
#include "inventory/inventory_at.h"
#include "support/fixture_host.h"

namespace tessera::inventory {
namespace {

namespace fs = std::filesystem;

void Write(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

bool AnyWarningContains(const std::vector<std::string>& warnings, const std::string& text) {
  for (const auto& w : warnings) {
    if (w.find(text) != std::string::npos) return true;
  }
  return false;
}

const std::string kGpuDir =
    "/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0";

TEST(BadInput, GarbageInNumaNodeIsAWarningAndLeavesUnknown) {
  testing::TempHost host("hgx-h100-dgx");
  Write(host.root() + kGpuDir + "/numa_node", "zero\n");
  Inventory inv = InventoryAt(host.root());
  const PciDevice* gpu = inv.FindDevice("0000:18:00.0");
  ASSERT_NE(gpu, nullptr);
  EXPECT_EQ(gpu->numa_node, -1);
  EXPECT_TRUE(AnyWarningContains(gpu->warnings, "0000:18:00.0/numa_node"));
}

TEST(BadInput, GarbageDeviceIdIsReportedNotZeroedSilently) {
  testing::TempHost host("hgx-h100-dgx");
  Write(host.root() + kGpuDir + "/device", "0xnope\n");
  Inventory inv = InventoryAt(host.root());
  const PciDevice* gpu = inv.FindDevice("0000:18:00.0");
  ASSERT_NE(gpu, nullptr);
  EXPECT_TRUE(AnyWarningContains(gpu->warnings, "0000:18:00.0/device"));
  EXPECT_EQ(inv.devices.size(), 12u);
}

TEST(BadInput, UnreadableClassSkipsTheFunctionWithAWarning) {
  testing::TempHost host("hgx-h100-dgx");
  fs::remove(host.root() + kGpuDir + "/class");
  Inventory inv = InventoryAt(host.root());
  EXPECT_EQ(inv.FindDevice("0000:18:00.0"), nullptr);
  EXPECT_TRUE(AnyWarningContains(inv.warnings, "0000:18:00.0/class"));
  EXPECT_EQ(inv.Gpus().size(), 7u);
}

TEST(BadInput, DanglingDeviceSymlinkIsAWarning) {
  testing::TempHost host("hgx-h100-dgx");
  fs::remove_all(host.root() + kGpuDir);
  Inventory inv = InventoryAt(host.root());
  EXPECT_EQ(inv.FindDevice("0000:18:00.0"), nullptr);
  EXPECT_TRUE(AnyWarningContains(inv.warnings, "0000:18:00.0"));
  EXPECT_EQ(inv.Gpus().size(), 7u);
}

TEST(BadInput, GpuWithoutProcEntryHasNoNodeAndSaysWhy) {
  testing::TempHost host("hgx-h100-dgx");
  fs::remove_all(host.root() + "/proc/driver/nvidia/gpus/0000:2a:00.0");
  Inventory inv = InventoryAt(host.root());
  const PciDevice* gpu = inv.FindDevice("0000:2a:00.0");
  ASSERT_NE(gpu, nullptr);
  EXPECT_TRUE(gpu->device_nodes.empty());
  EXPECT_FALSE(gpu->nvidia_minor.has_value());
  EXPECT_TRUE(
      AnyWarningContains(gpu->warnings, "/proc/driver/nvidia/gpus/0000:2a:00.0/information"));
}

TEST(BadInput, CorruptLdCacheIsWarnedAboutAndTheLoadersOwnDirectoriesStillCount) {
  testing::TempHost host("hgx-h100-dgx");
  Write(host.root() + "/etc/ld.so.cache", "glibc-ld.so.cache1.1\x05\x00\x00\x00");
  Inventory inv = InventoryAt(host.root());
  ASSERT_TRUE(inv.nvidia_driver.has_value());
  // The loader ignores a cache it cannot read and searches its built-in directories, where
  // this host's driver libraries are; so does the inventory.
  EXPECT_EQ(inv.nvidia_driver->libraries.size(), 14u);
  EXPECT_TRUE(AnyWarningContains(inv.warnings, "/etc/ld.so.cache"));
  EXPECT_EQ(inv.nvidia_driver->binaries.size(), 5u);
}

TEST(BadInput, MissingProcDevicesDropsNodesButKeepsDevices) {
  testing::TempHost host("hgx-h100-dgx");
  fs::remove(host.root() + "/proc/devices");
  Inventory inv = InventoryAt(host.root());
  EXPECT_EQ(inv.Gpus().size(), 8u);
  EXPECT_TRUE(AnyWarningContains(inv.warnings, "/proc/devices"));
  EXPECT_TRUE(inv.shared_device_nodes.empty());
  for (const PciDevice* gpu : inv.Gpus()) {
    EXPECT_TRUE(gpu->device_nodes.empty());
    EXPECT_TRUE(AnyWarningContains(gpu->warnings, "nvidia-frontend"));
  }
}

TEST(BadInput, BadResourceFileIsAWarning) {
  testing::TempHost host("hgx-h100-dgx");
  Write(host.root() + kGpuDir + "/resource", "0x1000 0x0fff 0x0\n");
  Inventory inv = InventoryAt(host.root());
  const PciDevice* gpu = inv.FindDevice("0000:18:00.0");
  ASSERT_NE(gpu, nullptr);
  EXPECT_TRUE(gpu->bars.empty());
  EXPECT_TRUE(AnyWarningContains(gpu->warnings, "0000:18:00.0/resource"));
}

TEST(BadInput, RemovedDeviceNodeIsReportedAsMissing) {
  testing::TempHost host("hgx-h100-dgx");
  fs::remove(host.root() + "/dev/nvidia3");
  Inventory inv = InventoryAt(host.root());
  const PciDevice* gpu = inv.FindDevice("0000:5d:00.0");
  ASSERT_NE(gpu, nullptr);
  ASSERT_EQ(gpu->device_nodes.size(), 1u);
  EXPECT_FALSE(gpu->device_nodes[0].exists);
  EXPECT_EQ(gpu->device_nodes[0].minor, 3u);  // numbers still come from the kernel
}

TEST(BadInput, SymlinkLoopIsAWarning) {
  testing::TempHost host("no-gpu");
  std::string loop = host.root() + "/sys/bus/pci/devices/0000:00:09.0";
  ASSERT_EQ(::symlink("0000:00:09.0", loop.c_str()), 0);
  Inventory inv = InventoryAt(host.root());
  EXPECT_TRUE(inv.devices.empty());
  EXPECT_TRUE(AnyWarningContains(inv.warnings, "0000:00:09.0"));
}

}  // namespace
}  // namespace tessera::inventory

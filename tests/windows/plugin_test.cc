#include <gtest/gtest.h>

#include "windows/fixture.h"
#include "windows/windows.h"

namespace tessera::windows {
namespace {

using testing::LoadFixture;

TEST(PluginInventory, DisplayAdaptersAndComputeOnlyAdaptersAreSeparateResources) {
  Snapshot laptop = LoadFixture("laptop-igpu-dgpu.json");
  auto a = BuildPluginInventory(laptop, 1);
  ASSERT_TRUE(a.ok());
  ASSERT_EQ(a->resources.size(), 1u);
  EXPECT_EQ(a->resources[0].name, "directx.microsoft.com/display");
  EXPECT_EQ(a->resources[0].devices.size(), 2u);

  Snapshot mcdm = LoadFixture("mcdm-compute-only.json");
  auto b = BuildPluginInventory(mcdm, 1);
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->resources.size(), 1u);
  EXPECT_EQ(b->resources[0].name, "directx.microsoft.com/compute");
  ASSERT_EQ(b->resources[0].devices.size(), 2u);
  EXPECT_EQ(b->resources[0].devices[0].id, "PCIROOT(1)#PCI(0100)#PCI(0000)#PCI(0000)#PCI(0000)");
}

TEST(PluginInventory, ReplicasAdvertiseEachAdapterSeveralTimes) {
  Snapshot s = LoadFixture("ws2022-aws-4xt4.json");
  auto inv = BuildPluginInventory(s, 3);
  ASSERT_TRUE(inv.ok());
  ASSERT_EQ(inv->resources.size(), 1u);
  const auto& devices = inv->resources[0].devices;
  ASSERT_EQ(devices.size(), 12u);
  EXPECT_EQ(devices[0].id, "PCIROOT(0)#PCI(1B00)::0");
  EXPECT_EQ(devices[2].id, "PCIROOT(0)#PCI(1B00)::2");
  EXPECT_EQ(devices[3].id, "PCIROOT(0)#PCI(1C00)::0");
  EXPECT_EQ(devices[11].adapter_index, 3);
  EXPECT_FALSE(BuildPluginInventory(s, 0).ok());
}

TEST(PluginInventory, AdaptersWithoutALocationPathAreSkippedWithAReason) {
  Snapshot s = LoadFixture("malformed-copytovm.json");
  auto inv = BuildPluginInventory(s, 1);
  ASSERT_TRUE(inv.ok());
  EXPECT_EQ(inv->resources[0].devices.size(), 1u);
  EXPECT_EQ(inv->skipped,
            std::vector<std::string>{
                "adapter 1 (Microsoft Remote Display Adapter): no PCI location path"});
}

TEST(PluginAllocate, ReturnsLocationPathDeviceSpecsWithEmptyFieldsAndReadOnlyMounts) {
  Snapshot s = LoadFixture("ws2022-aws-4xt4.json");
  auto inv = BuildPluginInventory(s, 2);
  ASSERT_TRUE(inv.ok());
  auto alloc = Allocate(
      s, *inv, {"PCIROOT(0)#PCI(1E00)::1", "PCIROOT(0)#PCI(1C00)::0", "PCIROOT(0)#PCI(1E00)::0"},
      DefaultVendorFiles());
  ASSERT_TRUE(alloc.ok());
  EXPECT_EQ(alloc->devices,
            (std::vector<PluginDeviceSpec>{{"vpci-location-path://PCIROOT(0)#PCI(1E00)", "", ""},
                                           {"vpci-location-path://PCIROOT(0)#PCI(1C00)", "", ""}}));
  ASSERT_EQ(alloc->mounts.size(), 13u);
  EXPECT_EQ(
      alloc->mounts[0],
      (PluginMount{"C:\\Windows\\System32\\nvapi64.dll",
                   "C:\\Windows\\System32\\DriverStore\\FileRepository\\nvgridsw_aws.inf_amd64_"
                   "5a7e8d3b1d4e2f90\\nvapi64.dll",
                   true}));
  for (const PluginMount& m : alloc->mounts)
    EXPECT_TRUE(m.read_only);
  EXPECT_TRUE(alloc->problems.empty());
}

TEST(PluginAllocate, UnknownIdsAreNotFound) {
  Snapshot s = LoadFixture("ws2025-l4.json");
  auto inv = BuildPluginInventory(s, 1);
  ASSERT_TRUE(inv.ok());
  auto alloc = Allocate(s, *inv, {"PCIROOT(0)#PCI(0100)#PCI(0000)::0"}, {});
  ASSERT_FALSE(alloc.ok());
  EXPECT_EQ(alloc.error().category, ErrorCategory::kNotFound);
}

TEST(PluginAllocate, ReportsRejectedValuesForTheLog) {
  Snapshot s = LoadFixture("malformed-copytovm.json");
  auto inv = BuildPluginInventory(s, 1);
  ASSERT_TRUE(inv.ok());
  auto alloc = Allocate(s, *inv, {"PCIROOT(0)#PCI(1E00)"}, {});
  ASSERT_TRUE(alloc.ok());
  EXPECT_EQ(alloc->mounts.size(), 6u);
  EXPECT_EQ(alloc->problems.size(), 11u);
}

TEST(PluginInventoryHyperV, OnlyDismountedGpusOncePerGpu) {
  Snapshot s = LoadFixture("ws2022-dda-t4.json");
  auto inv = BuildHyperVPluginInventory(s);
  ASSERT_TRUE(inv.ok()) << inv.error().message;
  ASSERT_EQ(inv->resources.size(), 1u);
  EXPECT_EQ(inv->resources[0].name, "tessera.dev/hyperv-gpu");
  ASSERT_EQ(inv->resources[0].devices.size(), 1u);
  EXPECT_EQ(inv->resources[0].devices[0].id, "PCIROOT(0)#PCI(0300)#PCI(0000)");
  EXPECT_EQ(inv->resources[0].devices[0].adapter_index, 1);
  ASSERT_EQ(inv->skipped.size(), 1u);
  EXPECT_EQ(inv->skipped[0],
            "PCI adapter 0 (Microsoft Basic Display Adapter): not dismounted from the host");

  auto allocation = AllocateHyperV(s, *inv, {"PCIROOT(0)#PCI(0300)#PCI(0000)"});
  ASSERT_TRUE(allocation.ok()) << allocation.error().message;
  ASSERT_EQ(allocation->devices.size(), 1u);
  EXPECT_EQ(
      allocation->devices[0],
      (PluginDeviceSpec{
          "vpci-instance-id://PCIP\\VEN_10DE&DEV_1EB8&SUBSYS_12A210DE&REV_A1\\4&2C9A8E5&0&0018", "",
          ""}));
  EXPECT_TRUE(allocation->mounts.empty());
  EXPECT_EQ(AllocateHyperV(s, *inv, {"PCIROOT(0)#PCI(0400)"}).error().category,
            ErrorCategory::kNotFound);
  auto two = AllocateHyperV(s, *inv, {"PCIROOT(0)#PCI(0300)#PCI(0000)", "x"});
  ASSERT_FALSE(two.ok());
  EXPECT_EQ(two.error().category, ErrorCategory::kInvalidArgument);
}

TEST(PluginInventoryHyperV, MountedGpusAndFormatOneSnapshotsOfferNone) {
  auto mounted = BuildHyperVPluginInventory(LoadFixture("ws2022-t4-not-dismounted.json"));
  ASSERT_TRUE(mounted.ok());
  EXPECT_TRUE(mounted->resources.empty());
  EXPECT_EQ(mounted->skipped.size(), 2u);
  auto v1 = BuildHyperVPluginInventory(LoadFixture("ws2022-aws-4xt4.json"));
  ASSERT_FALSE(v1.ok());
  EXPECT_EQ(v1.error().category, ErrorCategory::kFailedPrecondition);
}

}  // namespace
}  // namespace tessera::windows

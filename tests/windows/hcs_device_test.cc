#include <gtest/gtest.h>

#include "windows/windows.h"

namespace tessera::windows {
namespace {

DeviceRef Device(const std::string& text) {
  auto r = ParseDeviceString(text);
  EXPECT_TRUE(r.ok()) << text;
  return r.ok() ? *r : DeviceRef{};
}

TEST(HcsSchema, FollowsTheBuildTable) {
  EXPECT_FALSE(HcsSchemaForBuild(14393).ok());
  EXPECT_EQ(FormatSchemaVersion(*HcsSchemaForBuild(17763)), "2.1");
  EXPECT_EQ(FormatSchemaVersion(*HcsSchemaForBuild(18362)), "2.2");
  EXPECT_EQ(FormatSchemaVersion(*HcsSchemaForBuild(18363)), "2.2");
  EXPECT_EQ(FormatSchemaVersion(*HcsSchemaForBuild(19041)), "2.3");
  EXPECT_EQ(FormatSchemaVersion(*HcsSchemaForBuild(20348)), "2.5");
  EXPECT_EQ(FormatSchemaVersion(*HcsSchemaForBuild(22000)), "2.6");
  EXPECT_EQ(FormatSchemaVersion(*HcsSchemaForBuild(22621)), "2.7");
  EXPECT_EQ(FormatSchemaVersion(*HcsSchemaForBuild(26100)), "2.7");
  EXPECT_EQ(HcsSchemaVersionsForBuild(20348).size(), 5u);
  EXPECT_TRUE(HcsSchemaVersionsForBuild(10240).empty());
}

TEST(HcsDevice, ClassGuidWorksFromSchema21) {
  auto doc = HcsDeviceJson(Device("class/5b45201d-f2f2-4f3b-85bb-30ff1f953599"), {2, 1},
                           Isolation::kProcess);
  ASSERT_TRUE(doc.ok());
  EXPECT_EQ(*doc, R"({"InterfaceClassGuid":"5B45201D-F2F2-4F3B-85BB-30FF1F953599"})");
}

TEST(HcsDevice, LocationPathNeedsSchema22NotWs2019s21) {
  DeviceRef d = Device("vpci-location-path://PCIROOT(0)#PCI(1E00)");
  auto refused = HcsDeviceJson(d, *HcsSchemaForBuild(17763), Isolation::kProcess);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().category, ErrorCategory::kFailedPrecondition);
  EXPECT_NE(refused.error().message.find("needs HCS schema 2.2 (Windows build 18362 or later); "
                                         "this host supports 2.1"),
            std::string::npos)
      << refused.error().message;
  auto ok = HcsDeviceJson(d, {2, 2}, Isolation::kProcess);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, R"js({"Type":"DeviceInstance","LocationPath":"PCIROOT(0)#PCI(1E00)"})js");
}

TEST(HcsDevice, HyperVOnlyTypesAreRefusedForProcessIsolation) {
  for (const char* text :
       {"vpci-instance-id://PCIP\\A\\B", "vpci://PCIP\\A\\B", "gpu://PCIP\\A\\B"}) {
    auto r = HcsDeviceJson(Device(text), {2, 7}, Isolation::kProcess);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.error().category, ErrorCategory::kInvalidArgument);
    EXPECT_NE(r.error().message.find("assigns a device to a Hyper-V utility VM"),
              std::string::npos);
  }
}

TEST(HcsDevice, HyperVAssignsInstancesToTheUtilityVm) {
  auto r = HcsDeviceJson(Device("vpci-instance-id://PCIP\\A\\B"), {2, 3}, Isolation::kHyperV);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, R"({"VirtualPciDevice":{"Functions":[{"DeviceInstancePath":"PCIP\\A\\B"}]}})");
  EXPECT_FALSE(HcsDeviceJson(Device("vpci://PCIP\\A\\B"), {2, 1}, Isolation::kHyperV).ok());
  EXPECT_FALSE(HcsDeviceJson(Device("class/5B45201D-F2F2-4F3B-85BB-30FF1F953599"), {2, 7},
                             Isolation::kHyperV)
                   .ok());
}

TEST(HcsDevice, NoSchemaAtAllIsRefused) {
  auto r =
      HcsDeviceJson(Device("class/5B45201D-F2F2-4F3B-85BB-30FF1F953599"), {}, Isolation::kProcess);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("this host supports none"), std::string::npos);
}

TEST(Isolation, ParsesBothModes) {
  EXPECT_EQ(*ParseIsolation("process"), Isolation::kProcess);
  EXPECT_EQ(*ParseIsolation("hyperv"), Isolation::kHyperV);
  EXPECT_FALSE(ParseIsolation("vm").ok());
}

}  // namespace
}  // namespace tessera::windows

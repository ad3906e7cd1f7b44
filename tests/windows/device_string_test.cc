#include <gtest/gtest.h>

#include "windows/windows.h"

namespace tessera::windows {
namespace {

constexpr const char* kGuid = "5B45201D-F2F2-4F3B-85BB-30FF1F953599";

std::string ErrorOf(const std::string& text) {
  auto r = ParseDeviceString(text);
  EXPECT_FALSE(r.ok()) << text;
  return r.ok() ? "" : r.error().message;
}

TEST(DeviceString, ParsesEverySyntax) {
  struct Case {
    std::string text;
    DeviceIdType type;
    std::string id;
  };
  std::vector<Case> cases = {
      {std::string("class/") + kGuid, DeviceIdType::kClass, kGuid},
      {"class://5b45201d-f2f2-4f3b-85bb-30ff1f953599", DeviceIdType::kClass, kGuid},
      {"class://{5B45201D-F2F2-4F3B-85BB-30FF1F953599}", DeviceIdType::kClass, kGuid},
      {std::string("vpci-class-guid://") + kGuid, DeviceIdType::kVpciClassGuid, kGuid},
      {"vpci-location-path://PCIROOT(0)#PCI(0100)#PCI(0000)", DeviceIdType::kVpciLocationPath,
       "PCIROOT(0)#PCI(0100)#PCI(0000)"},
      {"vpci-instance-id://PCIP\\VEN_10DE&DEV_1EB8&SUBSYS_12A210DE&REV_A1\\4&2C9A8E5&0&00F0",
       DeviceIdType::kVpciInstanceId,
       "PCIP\\VEN_10DE&DEV_1EB8&SUBSYS_12A210DE&REV_A1\\4&2C9A8E5&0&00F0"},
      {"vpci://PCIP\\VEN_10DE&DEV_1EB8\\1", DeviceIdType::kVpci, "PCIP\\VEN_10DE&DEV_1EB8\\1"},
      {"gpu://PCIP\\VEN_10DE&DEV_1EB8\\1", DeviceIdType::kGpu, "PCIP\\VEN_10DE&DEV_1EB8\\1"},
  };
  for (const Case& c : cases) {
    auto r = ParseDeviceString(c.text);
    ASSERT_TRUE(r.ok()) << c.text << ": " << r.error().message;
    EXPECT_EQ(r->type, c.type) << c.text;
    EXPECT_EQ(r->id, c.id) << c.text;
  }
}

TEST(DeviceString, FormatsTheContainerdSpellingAndParsesItBack) {
  for (const char* text : {"class://5B45201D-F2F2-4F3B-85BB-30FF1F953599",
                           "vpci-location-path://PCIROOT(0)#PCI(1E00)", "gpu://PCI\\A\\B"}) {
    auto r = ParseDeviceString(text);
    ASSERT_TRUE(r.ok()) << text;
    EXPECT_EQ(FormatDeviceString(*r), text);
  }
}

TEST(DeviceString, HyperVOnlyTypesAreMarked) {
  EXPECT_TRUE(ParseDeviceString("vpci-instance-id://PCIP\\A\\B")->IsHyperVOnly());
  EXPECT_TRUE(ParseDeviceString("vpci://PCIP\\A\\B")->IsHyperVOnly());
  EXPECT_TRUE(ParseDeviceString("gpu://PCIP\\A\\B")->IsHyperVOnly());
  EXPECT_FALSE(ParseDeviceString("vpci-location-path://PCIROOT(0)#PCI(1E00)")->IsHyperVOnly());
  EXPECT_FALSE(ParseDeviceString(std::string("class/") + kGuid)->IsHyperVOnly());
}

TEST(DeviceString, ErrorsNameTheProblem) {
  EXPECT_EQ(ErrorOf(""), "device string is empty");
  EXPECT_EQ(ErrorOf("5B45201D-F2F2-4F3B-85BB-30FF1F953599"),
            "device string \"5B45201D-F2F2-4F3B-85BB-30FF1F953599\" has no type: expected "
            "class/GUID or TYPE://ID with TYPE one of class, vpci-class-guid, vpci-location-path, "
            "vpci-instance-id, vpci, gpu");
  EXPECT_EQ(ErrorOf("pci://0000:00:1e.0"),
            "unknown device type \"pci\" (expected class, vpci-class-guid, vpci-location-path, "
            "vpci-instance-id, vpci or gpu)");
  EXPECT_EQ(ErrorOf("GPU://x\\y"), "device type \"GPU\" must be lowercase: gpu");
  EXPECT_EQ(ErrorOf("vpci://"), "device string \"vpci://\" has an empty ID");
  EXPECT_EQ(ErrorOf("class/"), "device string \"class/\" has an empty ID");
  EXPECT_EQ(ErrorOf("class/5B45201D-F2F2-4F3B-85BB"),
            "class device: GUID \"5B45201D-F2F2-4F3B-85BB\" is not 8-4-4-4-12 hex digits "
            "(expected '-' at character 24)");
  EXPECT_EQ(ErrorOf("class://5B45201D-F2F2-4F3B-85BB-30FF1F95359Z"),
            "class device: GUID \"5B45201D-F2F2-4F3B-85BB-30FF1F95359Z\" is not 8-4-4-4-12 hex "
            "digits (problem at character 36)");
  EXPECT_EQ(ErrorOf("class://{5B45201D-F2F2-4F3B-85BB-30FF1F953599"),
            "class device: GUID \"{5B45201D-F2F2-4F3B-85BB-30FF1F953599\" has an unclosed brace");
  EXPECT_EQ(ErrorOf("vpci-class-guid://5B45201D-F2F2-4F3B-85BB-30FF1F953599x"),
            "vpci-class-guid device: GUID \"5B45201D-F2F2-4F3B-85BB-30FF1F953599x\" has trailing "
            "characters");
  EXPECT_EQ(ErrorOf("vpci-location-path://ACPI(_SB_)#ACPI(PCI0)"),
            "location path \"ACPI(_SB_)#ACPI(PCI0)\" does not start at a PCI root (expected "
            "PCIROOT(n)#PCI(ddff)...)");
  EXPECT_EQ(
      ErrorOf("vpci-location-path://PCIROOT(0)#PCI()"),
      "location path \"PCIROOT(0)#PCI()\" component 2 \"PCI()\" has empty or invalid arguments");
  EXPECT_EQ(ErrorOf("vpci-location-path://PCIROOT(0)##PCI(1E00)"),
            "location path \"PCIROOT(0)##PCI(1E00)\" component 2 is empty");
  EXPECT_EQ(ErrorOf("vpci-location-path://PCIROOT(0)#pci(1E00)"),
            "location path \"PCIROOT(0)#pci(1E00)\" component 2 name \"pci\" is not uppercase "
            "letters, digits or '_'");
  EXPECT_EQ(ErrorOf("vpci-location-path://PCIROOT(0)#PCI(1E00"),
            "location path \"PCIROOT(0)#PCI(1E00\" component 2 \"PCI(1E00\" is not NAME(ARGS)");
  EXPECT_EQ(ErrorOf("vpci-instance-id://PCIP\\VEN 10DE"),
            "vpci-instance-id device: instance ID \"PCIP\\VEN 10DE\" has an invalid character at "
            "position 9");
  EXPECT_EQ(ErrorOf("gpu://NOSLASH"),
            "gpu device: instance ID \"NOSLASH\" is not ENUMERATOR\\DEVICE\\INSTANCE (e.g. "
            "PCIP\\VEN_10DE&DEV_1EB8...\\...)");
  EXPECT_EQ(ErrorOf("vpci://" + std::string(201, 'A')),
            "vpci device: instance ID is 201 characters; Windows allows at most 200");
}

}  // namespace
}  // namespace tessera::windows

#include "inventory/parsers.h"

#include <gtest/gtest.h>

#include "common/atomic_file.h"

namespace tessera::inventory {
namespace {

TEST(HexAttribute, ParsesSysfsVendorAndRejectsGarbage) {
  EXPECT_EQ(*ParseHexAttribute("0x10de\n", 16), 0x10deu);
  EXPECT_EQ(*ParseHexAttribute("0x030200\n", 24), 0x030200u);
  EXPECT_FALSE(ParseHexAttribute("0x1234567\n", 24).ok());
  auto bad = ParseHexAttribute("nvidia\n", 16);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("\"nvidia"), std::string::npos);
  EXPECT_FALSE(ParseHexAttribute("", 16).ok());
}

TEST(DevNumbers, ParsesMajorMinorAndRejectsOutOfRange) {
  auto numbers = ParseDevNumbers("226:128\n");
  ASSERT_TRUE(numbers.ok());
  EXPECT_EQ(numbers->first, 226u);
  EXPECT_EQ(numbers->second, 128u);
  EXPECT_FALSE(ParseDevNumbers("226\n").ok());
  EXPECT_FALSE(ParseDevNumbers("4096:0").ok());
  EXPECT_FALSE(ParseDevNumbers(":1").ok());
}

TEST(ResourceFile, KeepsNonEmptyRegionsWithIndexAndSize) {
  std::string text =
      "0x00000000fb000000 0x00000000fbffffff 0x0000000000040200\n"
      "0x0000000000000000 0x0000000000000000 0x0000000000000000\n"
      "0x0000202000000000 0x0000203fffffffff 0x000000000014220c\n"
      "0x0000000000000000 0x0000000000000000 0x0000000000000000\n"
      "0x0000000000000000 0x0000000000000000 0x0000000000000000\n"
      "0x0000000000000000 0x0000000000000000 0x0000000000000000\n"
      "0x00000000fc000000 0x00000000fc07ffff 0x0000000000046200\n";
  auto bars = ParseResourceFile(text);
  ASSERT_TRUE(bars.ok()) << bars.error().message;
  ASSERT_EQ(bars->size(), 3u);
  EXPECT_EQ((*bars)[0].index, 0);
  EXPECT_EQ((*bars)[0].size, 16u << 20);
  EXPECT_EQ((*bars)[1].index, 2);
  EXPECT_EQ((*bars)[1].size, uint64_t{128} << 30);
  EXPECT_TRUE((*bars)[1].is_64bit_prefetchable());
  EXPECT_EQ((*bars)[2].index, 6);
  EXPECT_EQ((*bars)[2].size, 512u << 10);
}

TEST(ResourceFile, RejectsShortLinesAndReversedRanges) {
  EXPECT_FALSE(ParseResourceFile("0x1 0x2\n").ok());
  EXPECT_FALSE(ParseResourceFile("0x2000 0x1000 0x0\n").ok());
  EXPECT_FALSE(ParseResourceFile("0x1 0x2 0x3 0x4\n").ok());
  EXPECT_FALSE(ParseResourceFile("zz 0x2 0x3\n").ok());
}

TEST(ProcDevices, ReadsCharacterSectionOnly) {
  std::string text =
      "Character devices:\n  1 mem\n195 nvidia-frontend\n510 nvidia-uvm\n\nBlock devices:\n"
      "  8 sd\n259 blkext\n";
  auto majors = ParseProcDevices(text);
  ASSERT_TRUE(majors.ok());
  EXPECT_EQ(majors->at("nvidia-frontend"), 195u);
  EXPECT_EQ(majors->at("nvidia-uvm"), 510u);
  EXPECT_EQ(majors->count("sd"), 0u);
  EXPECT_FALSE(ParseProcDevices("garbage").ok());
  EXPECT_FALSE(ParseProcDevices("Character devices:\nabc def\n").ok());
}

TEST(NvidiaInformation, ReadsMinorUuidAndModel) {
  std::string text =
      "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 0\n"
      "GPU UUID: \t GPU-5e4b7c10-3c2a-4d8e-9f10-a1b2c3d4e5f0\n"
      "Bus Location: \t 0000:18:00.0\nDevice Minor: \t 3\n";
  auto info = ParseNvidiaGpuInformation(text);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->model, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(*info->uuid, "GPU-5e4b7c10-3c2a-4d8e-9f10-a1b2c3d4e5f0");
  EXPECT_EQ(*info->device_minor, 3);
  EXPECT_EQ(info->bus_location, "0000:18:00.0");
}

TEST(NvidiaInformation, UnknownUuidIsAbsentAndBadMinorIsAnError) {
  auto info = ParseNvidiaGpuInformation("GPU UUID: \t N/A\nDevice Minor: \t 0\n");
  ASSERT_TRUE(info.ok());
  EXPECT_FALSE(info->uuid.has_value());
  auto bad = ParseNvidiaGpuInformation("Device Minor: \t 255\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("Device Minor"), std::string::npos);
  EXPECT_FALSE(ParseNvidiaGpuInformation("Model: x\n").ok());
}

TEST(NvidiaDriverVersion, ReadsProprietaryOpenAndSysfsForms) {
  EXPECT_EQ(*ParseNvidiaDriverVersion(
                "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.129.03  Thu Oct 19 18:56:32 "
                "UTC 2023\nGCC version: gcc\n"),
            "535.129.03");
  EXPECT_EQ(*ParseNvidiaDriverVersion("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  "
                                      "580.65.06  Release Build  (dvs-builder@U16)  Sun Jul 27\n"),
            "580.65.06");
  EXPECT_EQ(*ParseNvidiaDriverVersion("580.65.06\n"), "580.65.06");
  EXPECT_FALSE(ParseNvidiaDriverVersion("NVRM version: garbage\n").ok());
  EXPECT_FALSE(ParseNvidiaDriverVersion("").ok());
  EXPECT_FALSE(ParseNvidiaDriverVersion("..\n").ok());
}

TEST(PciIds, FindsVendorAndDeviceWithoutConfusingSubsystems) {
  std::string ids =
      "# comment\n10de  NVIDIA Corporation\n\t2330  GH100 [H100 SXM5 80GB]\n\t\t10de 2330  sub\n"
      "\t22a3  GH100 [H100 NVSwitch]\n1af4  Red Hat, Inc.\n\t1000  Virtio network device\n";
  auto names = LookupPciIds(ids, 0x10de, 0x22a3);
  EXPECT_EQ(names.vendor, "NVIDIA Corporation");
  EXPECT_EQ(names.device, "GH100 [H100 NVSwitch]");
  // 0x1000 is listed only under another vendor: not a match for NVIDIA.
  EXPECT_EQ(LookupPciIds(ids, 0x10de, 0x1000).device, "");
  EXPECT_EQ(LookupPciIds(ids, 0x1234, 0x1000).vendor, "");
}

TEST(PciAddress, AcceptsCanonicalFormOnly) {
  EXPECT_TRUE(IsPciAddress("0000:18:00.0"));
  EXPECT_FALSE(IsPciAddress("0000:18:00.8"));
  EXPECT_FALSE(IsPciAddress("0000:1G:00.0"));
  EXPECT_FALSE(IsPciAddress("18:00.0"));
}

TEST(LdCache, ParsesThisMachinesRealCache) {
  auto bytes = ReadWholeFile("/etc/ld.so.cache");
  ASSERT_TRUE(bytes.ok());
  auto entries = ParseLdCache(*bytes);
  ASSERT_TRUE(entries.ok()) << entries.error().message;
  bool found_libc = false;
  for (const auto& entry : *entries) {
    if (entry.name == "libc.so.6" && entry.arch() == "x86_64") {
      found_libc = true;
      EXPECT_EQ(entry.path.substr(entry.path.size() - 9), "libc.so.6");
      EXPECT_EQ(entry.path.front(), '/');
    }
  }
  EXPECT_TRUE(found_libc);
}

TEST(LdCache, RejectsTruncatedAndOutOfRangeTables) {
  auto bytes = ReadWholeFile("/etc/ld.so.cache");
  ASSERT_TRUE(bytes.ok());
  EXPECT_FALSE(ParseLdCache(bytes->substr(0, 60)).ok());
  EXPECT_FALSE(ParseLdCache("garbage").ok());
  std::string corrupt = *bytes;
  // Point entry 0's name past the end of the file.
  corrupt[48 + 4] = '\xff';
  corrupt[48 + 5] = '\xff';
  corrupt[48 + 6] = '\xff';
  corrupt[48 + 7] = '\x7f';
  EXPECT_FALSE(ParseLdCache(corrupt).ok());
}

TEST(LdCache, ReadsNewFormatAfterLegacyTable) {
  auto bytes = ReadWholeFile("/etc/ld.so.cache");
  ASSERT_TRUE(bytes.ok());
  auto modern = ParseLdCache(*bytes);
  ASSERT_TRUE(modern.ok());
  // ldconfig's "compat" format: a legacy table with one entry, then the new table, 8-aligned.
  std::string legacy = "ld.so-1.7.0";
  legacy.push_back('\0');
  uint32_t one = 1;
  legacy.append(reinterpret_cast<const char*>(&one), 4);
  legacy.append(12, '\0');  // one legacy entry
  legacy.append(8 - legacy.size() % 8, '\0');
  auto combined = ParseLdCache(legacy + *bytes);
  ASSERT_TRUE(combined.ok()) << combined.error().message;
  EXPECT_EQ(combined->size(), modern->size());
}

}  // namespace
}  // namespace tessera::inventory

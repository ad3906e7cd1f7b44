#include "windows/snapshot.h"

#include <gtest/gtest.h>

#include "windows/fixture.h"

namespace tessera::windows {
namespace {

using testing::kAllFixtures;
using testing::LoadFixture;
using testing::ReadFixture;

std::string ErrorOf(const std::string& text) {
  auto s = ParseSnapshot(text);
  EXPECT_FALSE(s.ok()) << "parsed: " << text;
  return s.ok() ? "" : s.error().message;
}

// A minimal valid snapshot with one adapter; tests break one field at a time.
std::string Minimal(const std::string& adapter_extra = "", const std::string& value = "") {
  return R"js({"snapshot_version":1,"hostname":"h","os":{"product_name":"p","build":20348,"ubr":1},
    "hcs":{"schema_versions":["2.1","2.5"],"source":"service"},
    "adapters":[{"luid":"00000000000000aa","instance_id":"PCI\\VEN_10DE&DEV_1EB8\\1",
    "description":"d","vendor_id":"10de","device_id":"1eb8","subsystem_id":"12a210de",
    "revision":"a1","class_code":"030200","driver_service":"nvlddmkm","driver_version":"1.2.3.4",
    "driver_key":"k","driver_store_path":"C:\\S","location_paths":["PCIROOT(0)#PCI(1E00)"],
    "integrated":false,"detachable":false,"display":true,"compute":true)js" +
         adapter_extra + R"(,"copy_to_vm":[)" + value + "]}]}";
}

TEST(Snapshot, EveryFixtureParsesAndSerializesBackByteForByte) {
  for (const char* name : kAllFixtures) {
    std::string text = ReadFixture(name);
    Snapshot s = LoadFixture(name);
    EXPECT_EQ(SnapshotToJson(s), text) << name;
    auto again = ParseSnapshot(SnapshotToJson(s));
    ASSERT_TRUE(again.ok()) << name;
    EXPECT_EQ(*again, s) << name;
  }
}

TEST(Snapshot, ReadsEveryAdapterField) {
  Snapshot s = LoadFixture("ws2022-aws-4xt4.json");
  EXPECT_EQ(s.os.build, 20348u);
  EXPECT_EQ(s.os.ubr, 2849u);
  EXPECT_EQ(FormatSchemaVersion(s.MaxSchemaVersion()), "2.5");
  ASSERT_EQ(s.adapters.size(), 4u);
  const Adapter& a = s.adapters[3];
  EXPECT_EQ(a.luid, 0xe407u);
  EXPECT_EQ(a.vendor_id, 0x10de);
  EXPECT_EQ(a.device_id, 0x1eb8);
  EXPECT_EQ(a.subsystem_id, 0x12a210deu);
  EXPECT_EQ(a.revision, 0xa1);
  EXPECT_EQ(a.class_code, 0x030200u);
  EXPECT_EQ(a.driver_key, "{4d36e968-e325-11ce-bfc1-08002be10318}\\0004");
  EXPECT_EQ(a.PciLocationPath(), "PCIROOT(0)#PCI(1E00)");
  EXPECT_TRUE(a.display);
  EXPECT_TRUE(a.compute);
  ASSERT_EQ(a.copy_to_vm.size(), 12u);
  EXPECT_EQ(a.copy_to_vm[1].name, "nvcuda.dll");
  EXPECT_EQ(a.copy_to_vm[1].type, RegistryType::kMultiSz);
  EXPECT_EQ(a.copy_to_vm[1].strings, (std::vector<std::string>{"nvcuda64.dll", "nvcuda.dll"}));
  EXPECT_EQ(a.copy_to_vm.back().subkey, "nvtopps\\CopyToVmOverwrite");
}

TEST(Snapshot, ComputeOnlyAdaptersKeepDisplayFalse) {
  Snapshot s = LoadFixture("mcdm-compute-only.json");
  for (const Adapter& a : s.adapters) {
    EXPECT_FALSE(a.display) << a.description;
    EXPECT_TRUE(a.compute) << a.description;
  }
}

TEST(Snapshot, MinimalSnapshotParses) {
  auto s = ParseSnapshot(Minimal());
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->adapters.size(), 1u);
}

TEST(Snapshot, UnknownFieldIsNamedWithItsPath) {
  EXPECT_EQ(ErrorOf(Minimal(R"(,"bus":3)")), "adapters[0].bus: unknown field");
}

TEST(Snapshot, MissingFieldIsNamed) {
  std::string text = Minimal();
  text.replace(text.find(R"("integrated":false,)"), 19, "");
  EXPECT_EQ(ErrorOf(text), "adapters[0].integrated: missing field");
}

TEST(Snapshot, WrongTypesAreNamed) {
  std::string text = Minimal();
  text.replace(text.find(R"("display":true)"), 14, R"("display":"yes")");
  EXPECT_EQ(ErrorOf(text), "adapters[0].display: expected true or false, got string");
  text = Minimal();
  text.replace(text.find(R"("build":20348)"), 13, R"("build":-1)");
  EXPECT_EQ(ErrorOf(text), "os.build: expected a non-negative integer, got number");
}

TEST(Snapshot, HexIdsNeedTheirExactWidthWithout0x) {
  std::string text = Minimal();
  text.replace(text.find(R"("vendor_id":"10de")"), 18, R"("vendor_id":"0x10de")");
  EXPECT_EQ(ErrorOf(text),
            "adapters[0].vendor_id: expected 4 hex digits without 0x, got \"0x10de\"");
}

TEST(Snapshot, CopyToVmValuesAreChecked) {
  EXPECT_EQ(ErrorOf(Minimal(
                "", R"({"subkey":"CopyToVmOverwrite","name":"a","type":"REG_LINK","strings":[]})")),
            "adapters[0].copy_to_vm[0].type: unknown registry type \"REG_LINK\" (expected REG_SZ, "
            "REG_MULTI_SZ, REG_EXPAND_SZ, REG_DWORD, REG_QWORD, REG_BINARY or REG_NONE)");
  EXPECT_EQ(
      ErrorOf(Minimal(
          "", R"({"subkey":"CopyToVmOverwrite","name":"a","type":"REG_SZ","strings":["a","b"]})")),
      "adapters[0].copy_to_vm[0].strings: REG_SZ holds exactly one string, got 2");
  EXPECT_EQ(
      ErrorOf(Minimal(
          "", R"({"subkey":"CopyToVmOverwrite","name":"a","type":"REG_DWORD","strings":["1"]})")),
      "adapters[0].copy_to_vm[0].strings: REG_DWORD is not a string type: expected []");
  EXPECT_EQ(
      ErrorOf(Minimal("", R"({"subkey":"CopyToVm","name":"a","type":"REG_SZ","strings":["a"]})")),
      "adapters[0].copy_to_vm[0].subkey: \"CopyToVm\" does not name CopyToVmOverwrite, "
      "CopyToVmWhenNewer, CopyToVmOverwriteWow64 or CopyToVmWhenNewerWow64");
  EXPECT_EQ(
      ErrorOf(Minimal(
          "",
          R"({"subkey":"a\\b\\CopyToVmOverwrite","name":"a","type":"REG_SZ","strings":["a"]})")),
      "adapters[0].copy_to_vm[0].subkey: \"a\\b\\CopyToVmOverwrite\" is not CopyToVm* or "
      "<component>\\CopyToVm*");
  auto nested = ParseSnapshot(Minimal(
      "",
      R"({"subkey":"comp\\CopyToVmWhenNewerWow64","name":"","type":"REG_SZ","strings":["a"]})"));
  EXPECT_TRUE(nested.ok());
}

TEST(Snapshot, DuplicateLuidsAreRejected) {
  std::string text = Minimal();
  size_t start = text.find(R"({"luid")");
  size_t end = text.size() - 2;  // the adapters array's closing bracket
  std::string adapter = text.substr(start, end - start);
  text.insert(end, "," + adapter);
  EXPECT_EQ(ErrorOf(text), "adapters[1].luid: duplicate LUID 00000000000000aa");
}

TEST(Snapshot, UnsupportedVersionAndBadJsonAreErrors) {
  std::string text = Minimal();
  text.replace(text.find(R"("snapshot_version":1)"), 20, R"("snapshot_version":3)");
  EXPECT_EQ(ErrorOf(text), "snapshot_version: unsupported version 3 (this tessera reads 1 and 2)");
  text = Minimal();
  text.replace(text.find(R"("snapshot_version":1)"), 20, R"("snapshot_version":2)");
  EXPECT_EQ(ErrorOf(text), "pci_adapters: missing field");
  EXPECT_EQ(ErrorOf("[1]"), "snapshot: expected an object, got array");
  EXPECT_NE(ErrorOf("{").find("snapshot is not valid JSON"), std::string::npos);
  EXPECT_EQ(ErrorOf(Minimal().replace(Minimal().find("\"2.5\""), 5, "\"2.x\"")),
            "hcs.schema_versions[1]: HCS schema version \"2.x\" is not MAJOR.MINOR");
}

TEST(Snapshot, LuidsParseInEveryAcceptedSpelling) {
  EXPECT_EQ(*ParseLuid("000000000000d4a1"), 0xd4a1u);
  EXPECT_EQ(*ParseLuid("0xD4A1"), 0xd4a1u);
  EXPECT_EQ(FormatLuid(0x10000d4a1ull), "000000010000d4a1");
  EXPECT_FALSE(ParseLuid("1:0").ok());
  EXPECT_FALSE(ParseLuid("").ok());
  EXPECT_FALSE(ParseLuid("0x").ok());
  EXPECT_FALSE(ParseLuid("00000000000000001").ok());
}

}  // namespace
}  // namespace tessera::windows

#include <gtest/gtest.h>

#include <algorithm>

#include "windows/fixture.h"
#include "windows/windows.h"

namespace tessera::windows {
namespace {

constexpr const char* kStore = "C:\\Windows\\System32\\DriverStore\\FileRepository\\nv.inf_amd64_1";

Adapter WithValues(std::vector<CopyToVmValue> values, uint16_t vendor = 0x1002) {
  Adapter a;
  a.vendor_id = vendor;
  a.driver_store_path = kStore;
  a.copy_to_vm = std::move(values);
  return a;
}

CopyToVmValue Multi(std::string subkey, std::string name, std::vector<std::string> strings) {
  return {std::move(subkey), std::move(name), RegistryType::kMultiSz, std::move(strings)};
}
CopyToVmValue Sz(std::string subkey, std::string name, std::string source) {
  return {std::move(subkey), std::move(name), RegistryType::kSz, {std::move(source)}};
}

std::string Src(const std::string& file) {
  return std::string(kStore) + "\\" + file;
}

TEST(RuntimeFiles, MultiSzGivesSourceAndDestinationIntoSystem32) {
  RuntimeFiles f = PlanRuntimeFiles(
      WithValues({Multi("CopyToVmOverwrite", "cuda", {"nvcuda64.dll", "nvcuda.dll"})}), {});
  ASSERT_EQ(f.mounts.size(), 1u);
  EXPECT_EQ(f.mounts[0], (FileMount{Src("nvcuda64.dll"), "C:\\Windows\\System32\\nvcuda.dll",
                                    "CopyToVmOverwrite\\cuda", true}));
  EXPECT_TRUE(f.problems.empty());
}

TEST(RuntimeFiles, DestinationDefaultsToTheSourceFileName) {
  RuntimeFiles f =
      PlanRuntimeFiles(WithValues({Sz("CopyToVmWhenNewer", "a", "sub\\x64\\amdxc64.dll"),
                                   Multi("CopyToVmOverwrite", "b", {"./nvml.dll"})}),
                       {});
  ASSERT_EQ(f.mounts.size(), 2u);
  EXPECT_EQ(f.mounts[0].source, Src("sub\\x64\\amdxc64.dll"));
  EXPECT_EQ(f.mounts[0].destination, "C:\\Windows\\System32\\amdxc64.dll");
  EXPECT_EQ(f.mounts[1].source, Src("nvml.dll"));
  EXPECT_EQ(f.mounts[1].destination, "C:\\Windows\\System32\\nvml.dll");
}

TEST(RuntimeFiles, Wow64TwinsGoToSysWow64) {
  RuntimeFiles f = PlanRuntimeFiles(
      WithValues({Multi("CopyToVmOverwriteWow64", "a", {"nvcuda32.dll", "nvcuda.dll"}),
                  Sz("CopyToVmWhenNewerWow64", "b", "nvapi.dll")}),
      {});
  ASSERT_EQ(f.mounts.size(), 2u);
  EXPECT_EQ(f.mounts[0].destination, "C:\\Windows\\SysWOW64\\nvcuda.dll");
  EXPECT_EQ(f.mounts[1].destination, "C:\\Windows\\SysWOW64\\nvapi.dll");
}

TEST(RuntimeFiles, NestedComponentKeysAreIncludedAfterTopLevelOnes) {
  RuntimeFiles f =
      PlanRuntimeFiles(WithValues({Multi("media\\CopyToVmOverwrite", "m", {"media.dll"}),
                                   Multi("CopyToVmOverwrite", "t", {"top.dll"})}),
                       {});
  ASSERT_EQ(f.mounts.size(), 2u);
  EXPECT_EQ(f.mounts[0].origin, "CopyToVmOverwrite\\t");
  EXPECT_EQ(f.mounts[1].origin, "media\\CopyToVmOverwrite\\m");
}

TEST(RuntimeFiles, BadValuesAreReportedWithoutDroppingTheOthers) {
  RuntimeFiles f = PlanRuntimeFiles(
      WithValues({Multi("CopyToVmOverwrite", "up", {"..\\..\\System32\\kernel32.dll"}),
                  Multi("CopyToVmOverwrite", "good1", {"good1.dll"}),
                  Sz("CopyToVmOverwrite", "abs", "C:\\Windows\\System32\\ntdll.dll"),
                  Sz("CopyToVmOverwrite", "root", "\\payload.dll"),
                  Multi("CopyToVmOverwrite", "dest", {"a.dll", "..\\a.dll"}),
                  Multi("CopyToVmOverwrite", "dest2", {"a.dll", "C:a.dll"}),
                  Multi("CopyToVmOverwrite", "three", {"a", "b", "c"}),
                  Multi("CopyToVmOverwrite", "none", {}),
                  {"CopyToVmOverwrite", "dw", RegistryType::kDword, {}},
                  {"CopyToVmOverwrite", "exp", RegistryType::kExpandSz, {"%SystemRoot%\\x.dll"}},
                  Multi("CopyToVmOverwrite", "good2", {"good2.dll", "renamed.dll"})}),
      {});
  ASSERT_EQ(f.mounts.size(), 2u);
  EXPECT_EQ(f.mounts[0].destination, "C:\\Windows\\System32\\good1.dll");
  EXPECT_EQ(f.mounts[1].destination, "C:\\Windows\\System32\\renamed.dll");
  std::vector<std::string> expected = {
      "CopyToVmOverwrite\\up: source \"..\\..\\System32\\kernel32.dll\" escapes the DriverStore "
      "('..')",
      "CopyToVmOverwrite\\abs: source \"C:\\Windows\\System32\\ntdll.dll\" escapes the DriverStore "
      "(absolute path, drive or stream)",
      "CopyToVmOverwrite\\root: source \"\\payload.dll\" escapes the DriverStore (absolute path, "
      "drive or stream)",
      "CopyToVmOverwrite\\dest: destination \"..\\a.dll\" is not a bare file name (it must not "
      "contain \\ / : * ? \" < > | or control characters)",
      "CopyToVmOverwrite\\dest2: destination \"C:a.dll\" is not a bare file name (it must not "
      "contain \\ / : * ? \" < > | or control characters)",
      "CopyToVmOverwrite\\three: REG_MULTI_SZ holds 3 strings; expected source[, destination]",
      "CopyToVmOverwrite\\none: REG_MULTI_SZ holds 0 strings; expected source[, destination]",
      "CopyToVmOverwrite\\dw: type REG_DWORD is not REG_SZ or REG_MULTI_SZ",
      "CopyToVmOverwrite\\exp: type REG_EXPAND_SZ is not REG_SZ or REG_MULTI_SZ",
  };
  EXPECT_EQ(f.problems, expected);
}

TEST(RuntimeFiles, OverwriteBeatsWhenNewerWhateverTheOrder) {
  RuntimeFiles f =
      PlanRuntimeFiles(WithValues({Multi("CopyToVmWhenNewer", "old", {"v1\\x.dll", "x.dll"}),
                                   Multi("CopyToVmOverwrite", "new", {"v2\\x.dll", "x.dll"})}),
                       {});
  ASSERT_EQ(f.mounts.size(), 1u);
  EXPECT_EQ(f.mounts[0].source, Src("v2\\x.dll"));
  ASSERT_EQ(f.problems.size(), 1u);
  EXPECT_EQ(f.problems[0],
            "CopyToVmWhenNewer\\old: destination C:\\Windows\\System32\\x.dll conflicts with "
            "CopyToVmOverwrite\\new; the CopyToVmOverwrite value wins");
}

TEST(RuntimeFiles, BetweenEqualsTheFirstWinsAndTopLevelComesFirst) {
  RuntimeFiles f =
      PlanRuntimeFiles(WithValues({Multi("comp\\CopyToVmOverwrite", "c", {"c\\x.dll", "x.dll"}),
                                   Multi("CopyToVmOverwrite", "a", {"a\\x.dll", "X.DLL"}),
                                   Multi("CopyToVmOverwrite", "b", {"b\\x.dll", "x.dll"})}),
                       {});
  ASSERT_EQ(f.mounts.size(), 1u);
  EXPECT_EQ(f.mounts[0].source, Src("a\\x.dll"));
  EXPECT_EQ(f.problems.size(), 2u);
  EXPECT_EQ(f.problems[0],
            "CopyToVmOverwrite\\b: destination C:\\Windows\\System32\\x.dll already comes from "
            "CopyToVmOverwrite\\a; dropped");
}

TEST(RuntimeFiles, TheSameFileNamedTwiceIsMountedOnceSilently) {
  RuntimeFiles f = PlanRuntimeFiles(WithValues({Multi("CopyToVmOverwrite", "a", {"x.dll"}),
                                                Sz("CopyToVmWhenNewer", "b", "X.dll")}),
                                    {});
  EXPECT_EQ(f.mounts.size(), 1u);
  EXPECT_TRUE(f.problems.empty());
}

TEST(RuntimeFiles, VendorFilesAreKeyedByPciVendor) {
  Adapter nvidia = WithValues({Multi("CopyToVmOverwrite", "a", {"nvml.dll"})}, 0x10de);
  RuntimeFiles f = PlanRuntimeFiles(nvidia, DefaultVendorFiles());
  ASSERT_EQ(f.mounts.size(), 2u);
  EXPECT_EQ(f.mounts[1], (FileMount{Src("nvidia-smi.exe"), "C:\\Windows\\System32\\nvidia-smi.exe",
                                    "vendor 10de", true}));
  Adapter amd = WithValues({}, 0x1002);
  EXPECT_TRUE(PlanRuntimeFiles(amd, DefaultVendorFiles()).mounts.empty());
  VendorFiles custom = {{0x1002, {"amdsmi.exe"}}};
  EXPECT_EQ(PlanRuntimeFiles(amd, custom).mounts.size(), 1u);
  EXPECT_EQ(PlanRuntimeFiles(nvidia, custom).mounts.size(), 1u);
}

TEST(RuntimeFiles, VendorFileFlagsParse) {
  auto v = ParseVendorFile("10DE=nvdebugdump.exe");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->first, 0x10de);
  EXPECT_EQ(v->second, "nvdebugdump.exe");
  EXPECT_FALSE(ParseVendorFile("nvidia=nvidia-smi.exe").ok());
  EXPECT_FALSE(ParseVendorFile("10de").ok());
  EXPECT_EQ(ParseVendorFile("10de=..\\x.exe").error().message,
            "vendor file \"10de=..\\x.exe\": source \"..\\x.exe\" escapes the DriverStore ('..')");
}

TEST(RuntimeFiles, NoDriverStorePathSkipsEverythingWithOneProblem) {
  Adapter a = WithValues({Multi("CopyToVmOverwrite", "a", {"x.dll"})}, 0x10de);
  a.driver_store_path.clear();
  RuntimeFiles f = PlanRuntimeFiles(a, DefaultVendorFiles());
  EXPECT_TRUE(f.mounts.empty());
  EXPECT_EQ(f.problems, std::vector<std::string>{
                            "no DriverStore path: 1 CopyToVm* values and 1 vendor files skipped"});
}

TEST(RuntimeFiles, IdenticalGpusShareTheirFilesOnce) {
  Snapshot s = testing::LoadFixture("ws2022-aws-4xt4.json");
  std::vector<const Adapter*> all;
  for (const Adapter& a : s.adapters)
    all.push_back(&a);
  RuntimeFiles one = PlanRuntimeFiles(s.adapters[0], DefaultVendorFiles());
  RuntimeFiles four = PlanRuntimeFiles(all, DefaultVendorFiles());
  EXPECT_EQ(four.mounts, one.mounts);
  EXPECT_TRUE(four.problems.empty());
  EXPECT_EQ(four.mounts.size(), 13u);  // 12 CopyToVm* values + nvidia-smi.exe
}

TEST(RuntimeFiles, AcrossAdaptersTheEarlierAdapterKeepsAContestedDestination) {
  Adapter a = WithValues({Multi("CopyToVmOverwrite", "x", {"x.dll"})});
  Adapter b = a;
  b.luid = 2;
  b.description = "second";
  b.driver_store_path = "C:\\Other";
  RuntimeFiles f = PlanRuntimeFiles(std::vector<const Adapter*>{&a, &b}, {});
  ASSERT_EQ(f.mounts.size(), 1u);
  EXPECT_EQ(f.mounts[0].source, Src("x.dll"));
  ASSERT_EQ(f.problems.size(), 1u);
  EXPECT_NE(
      f.problems[0].find("adapter 0000000000000002 (second): CopyToVmOverwrite\\x: destination "
                         "C:\\Windows\\System32\\x.dll already comes from adapter "
                         "0000000000000000 ()"),
      std::string::npos)
      << f.problems[0];
}

TEST(RuntimeFiles, MalformedFixtureKeepsEveryGoodValue) {
  Snapshot s = testing::LoadFixture("malformed-copytovm.json");
  RuntimeFiles f = PlanRuntimeFiles(s.adapters[0], DefaultVendorFiles());
  std::vector<std::string> destinations;
  for (const FileMount& m : f.mounts)
    destinations.push_back(m.destination);
  EXPECT_EQ(destinations,
            (std::vector<std::string>{
                "C:\\Windows\\System32\\atidxx64.dll", "C:\\Windows\\System32\\amdxc64.dll",
                "C:\\Windows\\System32\\amdave64.dll", "C:\\Windows\\System32\\amdxx64.dll",
                "C:\\Windows\\SysWOW64\\amdxc32.dll", "C:\\Windows\\System32\\amdlogum.exe"}));
  EXPECT_EQ(f.problems.size(), 11u);
  for (const FileMount& m : f.mounts)
    EXPECT_TRUE(m.read_only);
}

}  // namespace
}  // namespace tessera::windows

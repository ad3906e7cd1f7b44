#include <gtest/gtest.h>

#include "windows/windows.h"

namespace tessera::windows {
namespace {

CompatibilityVerdict Check(uint32_t host, uint32_t image, Isolation iso, bool gpu = false,
                           std::string base = "") {
  return CheckCompatibility({host, {image, std::move(base)}, iso, gpu});
}

TEST(ImageTags, MapToBuilds) {
  EXPECT_EQ(BuildForTag("ltsc2019"), 17763u);
  EXPECT_EQ(BuildForTag("1809"), 17763u);
  EXPECT_EQ(BuildForTag("20H2"), 19042u);
  EXPECT_EQ(BuildForTag("ltsc2022"), 20348u);
  EXPECT_EQ(BuildForTag("ltsc2025"), 26100u);
  EXPECT_EQ(BuildForTag("10.0.20348.2849"), 20348u);
  EXPECT_EQ(BuildForTag("10.0.17763"), 17763u);
  EXPECT_FALSE(BuildForTag("latest"));
  EXPECT_FALSE(BuildForTag("10.0.x"));
}

TEST(ImageReferences, FindTheBuildAndTheBaseImage) {
  auto a = ParseImageReference("mcr.microsoft.com/windows/servercore:ltsc2022");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->build, 20348u);
  EXPECT_EQ(a->base, "servercore");
  auto b = ParseImageReference(
      "mcr.microsoft.com/dotnet/framework/runtime:4.8-windowsservercore-ltsc2019");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->build, 17763u);
  EXPECT_EQ(b->base, "servercore");
  auto c = ParseImageReference("mcr.microsoft.com/windows:ltsc2019-amd64");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->build, 17763u);
  EXPECT_EQ(c->base, "windows");
  auto d = ParseImageReference("localhost:5000/windows/nanoserver:1809");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->base, "nanoserver");
  EXPECT_FALSE(ParseImageReference("localhost:5000/app").ok());
  EXPECT_FALSE(ParseImageReference("mcr.microsoft.com/windows/servercore@sha256:00").ok());
  EXPECT_FALSE(ParseImageReference("").ok());
}

TEST(Compatibility, ProcessIsolationBefore20348NeedsAnExactMatch) {
  EXPECT_TRUE(Check(17763, 17763, Isolation::kProcess).ok);
  CompatibilityVerdict v = Check(19042, 19041, Isolation::kProcess);
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.summary.find("exactly 19042"), std::string::npos) << v.summary;
  EXPECT_NE(v.summary.find("0xc0370101"), std::string::npos);
}

TEST(Compatibility, From20348ImagesFromThePreviousLtscUpToTheHostRun) {
  EXPECT_TRUE(Check(20348, 20348, Isolation::kProcess).ok);
  EXPECT_FALSE(Check(20348, 17763, Isolation::kProcess).ok);
  EXPECT_TRUE(Check(22631, 20348, Isolation::kProcess).ok);
  EXPECT_TRUE(Check(26100, 20348, Isolation::kProcess).ok);
  EXPECT_TRUE(Check(26100, 26100, Isolation::kProcess).ok);
  EXPECT_FALSE(Check(26100, 17763, Isolation::kProcess).ok);
  EXPECT_FALSE(Check(26200, 20348, Isolation::kProcess).ok);  // previous LTSC is now 26100
  EXPECT_TRUE(Check(26200, 26100, Isolation::kProcess).ok);
}

TEST(Compatibility, HyperVRunsOlderImagesNeverNewer) {
  EXPECT_TRUE(Check(20348, 14393, Isolation::kHyperV).ok);
  EXPECT_TRUE(Check(26100, 17763, Isolation::kHyperV).ok);
  CompatibilityVerdict v = Check(20348, 26100, Isolation::kHyperV);
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.summary.find("newer than host build 20348"), std::string::npos);
  EXPECT_FALSE(Check(17763, 20348, Isolation::kProcess).ok);
}

TEST(Compatibility, GpuWithHyperVIsRefusedWithItsRequirementsWithoutTheHostsFacts) {
  CompatibilityVerdict v = Check(20348, 17763, Isolation::kHyperV, true, "windows");
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.summary.find("pass --snapshot FILE"), std::string::npos);
  std::string all;
  for (const std::string& d : v.details)
    all += d + "\n";
  for (const char* need :
       {"does not support", "Discrete Device Assignment", "PCIP\\", "fullyphysicallybacked=true",
        "io.microsoft.virtualmachine.kerneldrivers", "19041", "containerd 1.7+", "device-util.exe",
        "check-hyperv-gpu"}) {
    EXPECT_NE(all.find(need), std::string::npos) << need;
  }
}

TEST(Compatibility, GpuWarnsAboutServercoreAndNanoserver) {
  CompatibilityVerdict full = Check(20348, 20348, Isolation::kProcess, true, "windows");
  EXPECT_TRUE(full.ok);
  EXPECT_TRUE(full.warnings.empty());
  CompatibilityVerdict core = Check(20348, 20348, Isolation::kProcess, true, "servercore");
  EXPECT_TRUE(core.ok);
  ASSERT_EQ(core.warnings.size(), 1u);
  EXPECT_NE(core.warnings[0].find("expect missing DirectX components"), std::string::npos);
  CompatibilityVerdict core25 = Check(26100, 26100, Isolation::kProcess, true, "servercore");
  ASSERT_EQ(core25.warnings.size(), 1u);
  EXPECT_EQ(core25.warnings[0].find("expect missing"), std::string::npos);
  EXPECT_EQ(Check(26100, 26100, Isolation::kProcess, true, "nanoserver").warnings.size(), 1u);
  EXPECT_FALSE(Check(14393, 14393, Isolation::kProcess, true).ok);
}

}  // namespace
}  // namespace tessera::windows

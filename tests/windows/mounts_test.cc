#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "windows/fixture.h"
#include "windows/windows.h"

namespace tessera::windows {
namespace {

using testing::LoadFixture;

MountsOptions Options(MountFormat format, AdapterSelection selection) {
  MountsOptions o;
  o.format = format;
  o.selection = std::move(selection);
  return o;
}

AdapterSelection All() {
  return {true, {}, {}, {}};
}

std::vector<std::string> Devices(const MountsPlan& plan) {
  std::vector<std::string> out;
  for (const DeviceRef& d : plan.devices)
    out.push_back(FormatDeviceString(d));
  return out;
}

bool HasDiagnostic(const MountsPlan& plan, const std::string& part) {
  for (const std::string& d : plan.diagnostics) {
    if (d.find(part) != std::string::npos) return true;
  }
  return false;
}

TEST(Mounts, SelectsByIndexLuidAndPathInSnapshotOrder) {
  Snapshot s = LoadFixture("ws2022-aws-4xt4.json");
  auto by_index = PlanMounts(s, Options(MountFormat::kCtr, {false, {3, 1, 3}, {}, {}}));
  ASSERT_TRUE(by_index.ok());
  EXPECT_EQ(Devices(*by_index),
            (std::vector<std::string>{"vpci-location-path://PCIROOT(0)#PCI(1C00)",
                                      "vpci-location-path://PCIROOT(0)#PCI(1E00)"}));
  auto by_luid = PlanMounts(s, Options(MountFormat::kCtr, {false, {}, {0xdee5}, {}}));
  ASSERT_TRUE(by_luid.ok());
  EXPECT_EQ(Devices(*by_luid),
            std::vector<std::string>{"vpci-location-path://PCIROOT(0)#PCI(1D00)"});
  // Any of an adapter's location paths selects it, in any case.
  auto by_path = PlanMounts(
      s, Options(MountFormat::kCtr, {false, {}, {}, {"acpi(_sb_)#acpi(pci0)#acpi(s1b_)"}}));
  ASSERT_TRUE(by_path.ok());
  EXPECT_EQ(Devices(*by_path),
            std::vector<std::string>{"vpci-location-path://PCIROOT(0)#PCI(1B00)"});
}

TEST(Mounts, UnknownSelectionsAreNotFound) {
  Snapshot s = LoadFixture("ws2022-aws-4xt4.json");
  auto index = PlanMounts(s, Options(MountFormat::kCtr, {false, {4}, {}, {}}));
  ASSERT_FALSE(index.ok());
  EXPECT_EQ(index.error().category, ErrorCategory::kNotFound);
  EXPECT_EQ(index.error().message, "no adapter with index 4 (the snapshot has 4)");
  EXPECT_FALSE(PlanMounts(s, Options(MountFormat::kCtr, {false, {}, {1}, {}})).ok());
  EXPECT_FALSE(PlanMounts(s, Options(MountFormat::kCtr, {false, {}, {}, {"PCIROOT(9)"}})).ok());
  EXPECT_FALSE(PlanMounts(s, Options(MountFormat::kCtr, {})).ok());
  EXPECT_FALSE(PlanMounts(s, Options(MountFormat::kCtr, {true, {0}, {}, {}})).ok());
}

TEST(Mounts, CtrMountsAreReadOnlyBinds) {
  Snapshot s = LoadFixture("ws2025-l4.json");
  auto plan = PlanMounts(s, Options(MountFormat::kCtr, All()));
  ASSERT_TRUE(plan.ok());
  ASSERT_GE(plan->arguments.size(), 4u);
  EXPECT_EQ(plan->arguments[0], "--device");
  EXPECT_EQ(plan->arguments[2], "--mount");
  EXPECT_EQ(plan->arguments[3],
            "type=bind,src=C:\\Windows\\System32\\DriverStore\\FileRepository\\nvgridsw_azure.inf_"
            "amd64_7f3b2a9c0d1e4f56\\nvapi64.dll,dst=C:\\Windows\\System32\\nvapi64.dll,options="
            "rbind:ro");
  EXPECT_TRUE(plan->diagnostics.empty());  // one GPU on WS2025: nothing to warn about
}

TEST(Mounts, DockerGetsTheDisplayClassAndAWarning) {
  Snapshot s = LoadFixture("ws2025-l4.json");
  auto plan = PlanMounts(s, Options(MountFormat::kDocker, All()));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->arguments,
            (std::vector<std::string>{"--isolation", "process", "--device",
                                      "class/5B45201D-F2F2-4F3B-85BB-30FF1F953599"}));
  EXPECT_TRUE(plan->files.mounts.empty());
  EXPECT_TRUE(HasDiagnostic(*plan, "every GPU on the host becomes visible"));
  EXPECT_TRUE(HasDiagnostic(*plan, "will lack their DLLs"));
}

TEST(Mounts, Ws2019FallsBackToTheDisplayClass) {
  Snapshot s = LoadFixture("ws2019-t4.json");
  auto plan = PlanMounts(s, Options(MountFormat::kCtr, All()));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(Devices(*plan),
            std::vector<std::string>{"class://5B45201D-F2F2-4F3B-85BB-30FF1F953599"});
  EXPECT_TRUE(HasDiagnostic(*plan, "needs 2.2 (Windows Server 2019 has 2.1)"));
  EXPECT_FALSE(plan->files.mounts.empty());
}

TEST(Mounts, Ws2022WithSeveralGpusWarnsThatEveryGpuIsVisible) {
  Snapshot s = LoadFixture("ws2022-aws-4xt4.json");
  auto plan = PlanMounts(s, Options(MountFormat::kCtr, {false, {0}, {}, {}}));
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(HasDiagnostic(*plan, "this host has 4 GPUs"));
  EXPECT_TRUE(ShowsEveryGpuToContainers(20348, 9999));
  EXPECT_FALSE(ShowsEveryGpuToContainers(26100, 1));
  EXPECT_FALSE(ShowsEveryGpuToContainers(17763, 1));
  // The laptop (22631) has two GPUs but is not affected.
  auto laptop = PlanMounts(LoadFixture("laptop-igpu-dgpu.json"), Options(MountFormat::kCtr, All()));
  ASSERT_TRUE(laptop.ok());
  EXPECT_FALSE(HasDiagnostic(*laptop, "GPUs and runs"));
}

TEST(Mounts, AdaptersWithoutLocationPathsAreSkippedOrRefused) {
  Snapshot s = LoadFixture("malformed-copytovm.json");
  auto all = PlanMounts(s, Options(MountFormat::kCtr, All()));
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->adapters.size(), 1u);
  EXPECT_TRUE(HasDiagnostic(*all, "skipping adapter 1 (Microsoft Remote Display Adapter"));
  // The indirect display adapter does not count towards the WS2022 multi-GPU warning.
  EXPECT_FALSE(HasDiagnostic(*all, "GPUs and runs"));
  auto one = PlanMounts(s, Options(MountFormat::kCtr, {false, {1}, {}, {}}));
  ASSERT_FALSE(one.ok());
  EXPECT_EQ(one.error().category, ErrorCategory::kFailedPrecondition);
}

TEST(Mounts, JsonPlanIsRealJson) {
  Snapshot s = LoadFixture("laptop-igpu-dgpu.json");
  auto plan = PlanMounts(s, Options(MountFormat::kJson, {false, {1}, {}, {}}));
  ASSERT_TRUE(plan.ok());
  auto doc = nlohmann::json::parse(MountsPlanJson(s, *plan));
  EXPECT_EQ(doc["host"]["hcs_schema"], "2.7");
  ASSERT_EQ(doc["devices"].size(), 1u);
  EXPECT_EQ(doc["devices"][0]["idType"], "vpci-location-path");
  EXPECT_EQ(doc["devices"][0]["hcs_device"]["Type"], "DeviceInstance");
  EXPECT_EQ(doc["mounts"].size(), 12u);
  for (const auto& m : doc["mounts"])
    EXPECT_EQ(m["read_only"], true);
}

TEST(Mounts, RunCommandsHaveEachRuntimesShape) {
  Snapshot s = LoadFixture("ws2025-l4.json");
  MountsOptions o = Options(MountFormat::kCtr, All());
  o.vendor_files.clear();
  auto plan = PlanMounts(s, o);
  ASSERT_TRUE(plan.ok());
  auto ctr = RunCommand(MountFormat::kCtr, *plan, "img", {"cmd", "/c", "dir"}, "id1");
  ASSERT_TRUE(ctr.ok());
  EXPECT_EQ(std::vector<std::string>(ctr->begin(), ctr->begin() + 3),
            (std::vector<std::string>{"ctr", "run", "--rm"}));
  EXPECT_EQ(std::vector<std::string>(ctr->end() - 5, ctr->end()),
            (std::vector<std::string>{"img", "id1", "cmd", "/c", "dir"}));
  auto docker = RunCommand(MountFormat::kDocker, *plan, "img", {}, "id1");
  ASSERT_TRUE(docker.ok());
  EXPECT_EQ(docker->back(), "img");
  EXPECT_FALSE(RunCommand(MountFormat::kJson, *plan, "img", {}, "id").ok());
  EXPECT_FALSE(RunCommand(MountFormat::kCtr, *plan, "", {}, "id").ok());
}

TEST(Mounts, FormatsParse) {
  EXPECT_EQ(*ParseMountFormat("nerdctl"), MountFormat::kNerdctl);
  EXPECT_FALSE(ParseMountFormat("podman").ok());
}

}  // namespace
}  // namespace tessera::windows

// doctor's fabric checks over the HGX fixtures and hand-made answers of a fabric manager.
#include <gtest/gtest.h>

#include "fabricmanager/fixture_facts.h"
#include "fabricmanager/operator_tools.h"
#include "support/fixture_host.h"

namespace tessera::fabricmanager {
namespace {

using runtimes::Verdict;

runtimes::HostFacts Facts(const std::string& fixture) {
  return testing::FixtureFacts(fixture);
}

// The check `id` of a run (a copy: the run's vector is a temporary).
std::optional<runtimes::Check> Find(const std::vector<runtimes::Check>& checks,
                                    const std::string& id) {
  for (const auto& check : checks)
    if (check.id == id) return check;
  return std::nullopt;
}

std::vector<SupportedPartition> Listed(std::vector<uint32_t> active) {
  std::vector<SupportedPartition> out;
  for (const auto& p : topology::HgxH100Table().partitions) {
    SupportedPartition partition{p.id, false, {}};
    for (uint32_t id : active)
      partition.active = partition.active || id == p.id;
    for (int m : p.modules)
      partition.gpus.push_back({m, "", "", 18, 18});
    out.push_back(partition);
  }
  return out;
}

ModuleMap Modules() {
  ModuleMap map;
  for (int m = 1; m <= 8; ++m) {
    char address[16];
    std::snprintf(address, sizeof address, "0000:%02x:00.0", 0x10 * m);
    map.pci_by_module[m] = address;
  }
  return map;
}

TEST(FabricDoctor, NvswitchGroupsOnVfioPassAndOnTheHostDriverFail) {
  auto vfio = Facts("hgx-h100-vfio");
  FabricDoctorInput input;
  input.inventory = &vfio.inventory;
  input.members = vfio.group_members;
  input.service_vm = true;
  auto checks = FabricChecks(input);
  ASSERT_EQ(checks.size(), 1u);
  EXPECT_EQ(checks[0].verdict, Verdict::kPass) << checks[0].evidence;
  EXPECT_EQ(checks[0].evidence, "5 functions in IOMMU groups {4} of 4 NVSwitches, all on vfio-pci");

  auto dgx = Facts("hgx-h100-dgx");
  input.inventory = &dgx.inventory;
  input.members = dgx.group_members;
  auto on_host = FabricChecks(input);
  EXPECT_EQ(on_host[0].verdict, Verdict::kFail);
  EXPECT_NE(on_host[0].evidence.find("0000:05:00.0 (nvidia-nvswitch)"), std::string::npos)
      << on_host[0].evidence;
  EXPECT_NE(on_host[0].fix.find("vfio-pci"), std::string::npos);
}

TEST(FabricDoctor, TheFabricManagersAnswerDecidesTheVerdict) {
  FabricDoctorInput input;
  input.fm_address = "10.0.0.5";
  input.listed = Listed({3});
  auto ok = FabricChecks(input);
  ASSERT_EQ(ok.size(), 1u);
  EXPECT_EQ(ok[0].verdict, Verdict::kPass);
  EXPECT_EQ(ok[0].evidence, "at 10.0.0.5: 15 partitions, 1 active");
  input.listed = Result<std::vector<SupportedPartition>>(
      Unavailable("fmGetSupportedFabricPartitions: FM_ST_NOT_CONFIGURED (-8): ..."));
  EXPECT_EQ(FabricChecks(input)[0].verdict, Verdict::kWarn);
  input.listed = Result<std::vector<SupportedPartition>>(
      FailedPrecondition("fmGetSupportedFabricPartitions: FM_ST_NOT_SUPPORTED (-3): ..."));
  auto bare = FabricChecks(input);
  EXPECT_EQ(bare[0].verdict, Verdict::kFail);
  EXPECT_NE(bare[0].fix.find("FABRIC_MODE=1"), std::string::npos);
  input.listed = Result<std::vector<SupportedPartition>>(Unavailable("fmConnect: refused"));
  EXPECT_EQ(FabricChecks(input)[0].verdict, Verdict::kFail);
}

TEST(FabricDoctor, ActivePartitionsMustMatchTheLeases) {
  FabricDoctorInput input;
  input.fm_address = "10.0.0.5";
  input.modules = Modules();
  input.listed = Listed({3, 6});  // {1,3} and {6,8}
  deviceplugin::LeaseMap leases;
  leases["0000:10:00.0"] = {deviceplugin::LeaseState::kActive, "", "team-a", ""};
  leases["0000:30:00.0"] = {deviceplugin::LeaseState::kActive, "", "team-a", ""};
  input.leases = leases;
  auto idle = Find(FabricChecks(input), "fabric.leases");
  ASSERT_TRUE(idle.has_value());
  EXPECT_EQ(idle->verdict, Verdict::kWarn);
  EXPECT_EQ(idle->evidence, "active partitions nothing leases: 6 {6,8}");
  leases["0000:20:00.0"] = {deviceplugin::LeaseState::kReserved, "", "team-b", ""};
  input.leases = leases;
  auto uncovered = Find(FabricChecks(input), "fabric.leases");
  EXPECT_EQ(uncovered->verdict, Verdict::kFail);
  EXPECT_NE(uncovered->evidence.find("0000:20:00.0 (tenancy team-b)"), std::string::npos);
  input.listed = Listed({3});
  leases.erase("0000:20:00.0");
  leases["0000:80:00.0"] = {deviceplugin::LeaseState::kChecking, "", "", ""};  // not a holder
  input.leases = leases;
  EXPECT_EQ(Find(FabricChecks(input), "fabric.leases")->verdict, Verdict::kPass);
}

TEST(FabricDoctor, ConfigNeedsSharedModeRestartsAndTheSameAddress) {
  FabricDoctorInput input;
  input.fm_address = "192.168.122.2";
  input.config = ParseFabricManagerConfig(FabricManagerConfig({}));
  EXPECT_EQ(FabricChecks(input).back().verdict, Verdict::kPass);
  input.config = ParseFabricManagerConfig(
      "FABRIC_MODE=0\nFABRIC_MODE_RESTART=0\nFM_CMD_BIND_INTERFACE=127.0.0.1\n");
  auto bad = FabricChecks(input).back();
  EXPECT_EQ(bad.verdict, Verdict::kFail);
  EXPECT_NE(bad.evidence.find("FABRIC_MODE=0 (shared NVSwitch needs 1)"), std::string::npos);
  EXPECT_NE(bad.evidence.find("it listens on 127.0.0.1:6666, tessera calls 192.168.122.2:6666"),
            std::string::npos)
      << bad.evidence;
  input.config = ParseFabricManagerConfig(
      "FABRIC_MODE=1\nFABRIC_MODE_RESTART=0\nFM_CMD_BIND_INTERFACE=192.168.122.2\n");
  EXPECT_EQ(FabricChecks(input).back().verdict, Verdict::kWarn);
}

}  // namespace
}  // namespace tessera::fabricmanager

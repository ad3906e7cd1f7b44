// `tessera fabric` and `tessera doctor`'s fabric checks as real processes, talking to the
// stand-in fabric manager through the stand-in libnvfm.so.1 (state shared through its file).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "support/fake_fabric_manager.h"
#include "support/fake_nvml_state.h"
#include "support/fixture_host.h"

namespace tessera::testing {
namespace {

using nlohmann::json;

struct Ran {
  int status = -1;
  std::string out;  // stdout and stderr
};

Ran Tessera(const std::string& args) {
  Ran run;
  run.out = RunCommand(TesseraBinary() + " " + args + " 2>&1", &run.status);
  return run;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

const std::string kSocket = "unix:/run/nvidia-fabricmanager/socket";

std::string Fabric(const std::string& command) {
  return "fabric " + command + " --fabric-manager " + kSocket + " --nvfm-library " + FAKE_NVFM;
}

// The vfio host has no NVIDIA driver: the operator's table says where each module sits.
std::string WriteVfioTable(const std::string& dir) {
  const std::string path = dir + "/hgx.yaml";
  std::ofstream(path) << "board: hgx-h100-8gpu\nmodules: 8\npartitions:\n"
                         "  - {id: 0, gpus: [1, 2, 3, 4, 5, 6, 7, 8]}\n"
                         "  - {id: 1, gpus: [1, 2, 3, 4]}\n  - {id: 2, gpus: [5, 6, 7, 8]}\n"
                         "  - {id: 3, gpus: [1, 3]}\n  - {id: 4, gpus: [2, 4]}\n"
                         "  - {id: 5, gpus: [5, 7]}\n  - {id: 6, gpus: [6, 8]}\n"
                         "  - {id: 7, gpus: [1]}\n  - {id: 8, gpus: [2]}\n  - {id: 9, gpus: [3]}\n"
                         "  - {id: 10, gpus: [4]}\n  - {id: 11, gpus: [5]}\n"
                         "  - {id: 12, gpus: [6]}\n  - {id: 13, gpus: [7]}\n"
                         "  - {id: 14, gpus: [8]}\n"
                         "pci_addresses:\n  1: \"0000:2a:00.0\"\n  2: \"0000:5d:00.0\"\n"
                         "  3: \"0000:18:00.0\"\n  4: \"0000:3a:00.0\"\n  5: \"0000:ab:00.0\"\n"
                         "  6: \"0000:db:00.0\"\n  7: \"0000:9a:00.0\"\n  8: \"0000:ba:00.0\"\n";
  return path;
}

class FabricCli : public ::testing::Test {
 protected:
  FakeFabricManager fm_{"unix:/run/nvidia-fabricmanager/socket"};
  TempDir dir_;
};

TEST_F(FabricCli, ListsPartitionsWithModulesMappedThroughNvml) {
  FakeNvmlState nvml("hgx-h100-dgx");
  fm_.Set("active", "3");
  const std::string flags =
      " --root " + MaterializeHost("hgx-h100-dgx") + " --nvml " + std::string(FAKE_NVML);
  Ran table = Tessera(Fabric("partitions") + flags);
  ASSERT_EQ(table.status, 0) << table.out;
  EXPECT_EQ(table.out.substr(0, table.out.find('\n')),
            "PARTITION ID  STATUS    GPUs  NVLINKS  GPU PHYSICAL IDs  PCI ADDRESSES");
  EXPECT_NE(table.out.find("\n3             Active    2     36       1,3               "
                           "0000:2a:00.0,0000:18:00.0\n"),
            std::string::npos)
      << table.out;
  Ran listed = Tessera(Fabric("partitions") + flags + " --format json");
  ASSERT_EQ(listed.status, 0) << listed.out;
  auto doc = json::parse(listed.out);
  ASSERT_EQ(doc["partitions"].size(), 15u);
  EXPECT_EQ(doc["partitions"][0]["nvlinks"], 144);
  EXPECT_EQ(doc["partitions"][3]["active"], true);
  EXPECT_EQ(doc["partitions"][14]["gpus"][0],
            (json{{"module", 8}, {"pci_address", "0000:ba:00.0"}}));
}

TEST_F(FabricCli, VfioHostMapsModulesThroughTheTablesAddresses) {
  const std::string root = MaterializeHost("hgx-h100-vfio");
  const std::string table = WriteVfioTable(dir_.path());
  Ran listed = Tessera(Fabric("partitions") + " --root " + root + " --partition-table " + table +
                       " --format json");
  ASSERT_EQ(listed.status, 0) << listed.out;
  auto doc = json::parse(listed.out);
  EXPECT_EQ(doc["partitions"][1]["gpus"][2]["pci_address"], "0000:18:00.0");
  // Without the table the addresses are unknown, not guessed.
  Ran bare = Tessera(Fabric("partitions") + " --root " + root + " --format json");
  ASSERT_EQ(bare.status, 0) << bare.out;
  EXPECT_TRUE(json::parse(bare.out)["partitions"][1]["gpus"][2]["pci_address"].is_null());
  // A table that puts a module where this host has no GPU is an error at once.
  std::string wrong = table + ".yaml";
  std::string text = ReadFile(table);
  std::ofstream(wrong) << text.replace(text.find("0000:2a:00.0"), 12, "0000:2b:00.0");
  Ran mismatch = Tessera(Fabric("partitions") + " --root " + root + " --partition-table " + wrong);
  EXPECT_EQ(mismatch.status, 2) << mismatch.out;
  EXPECT_NE(mismatch.out.find("module 1: the partition table places it at 0000:2b:00.0, which "
                              "is no GPU of this host"),
            std::string::npos)
      << mismatch.out;
}

TEST_F(FabricCli, ActivateDeactivateAndTheFabricManagersReasons) {
  Ran activate = Tessera(Fabric("activate 3"));
  ASSERT_EQ(activate.status, 0) << activate.out;
  EXPECT_EQ(fm_.Active(), (std::vector<int>{3}));
  Ran overlap = Tessera(Fabric("activate 1"));
  EXPECT_EQ(overlap.status, 5);
  EXPECT_EQ(overlap.out,
            "tessera: fabric manager at " + kSocket +
                ": fmActivateFabricPartition(1): FM_ST_IN_USE (-7): an overlapping partition is "
                "active (active: partition 3 {1,3})\n");
  Ran inactive = Tessera(Fabric("deactivate 4"));
  EXPECT_EQ(inactive.status, 5);
  EXPECT_NE(inactive.out.find("FM_ST_UNINITIALIZED (-4): the partition is not active"),
            std::string::npos)
      << inactive.out;
  ASSERT_EQ(Tessera(Fabric("deactivate 3")).status, 0);
  EXPECT_TRUE(fm_.Active().empty());
  fm_.Set("mode", "not-shared");
  Ran bare = Tessera(Fabric("activate 2"));
  EXPECT_NE(bare.out.find("FM_ST_NOT_SUPPORTED (-3): the fabric manager is not in shared "
                          "NVSwitch mode (FABRIC_MODE=1 in fabricmanager.cfg)"),
            std::string::npos)
      << bare.out;
  Ran usage = Tessera(Fabric("activate x"));
  EXPECT_NE(usage.status, 0);
  Ran bad_address = Tessera("fabric activate 1 --fabric-manager '[::1]:6666'");
  EXPECT_EQ(bad_address.status, 2);
  EXPECT_NE(bad_address.out.find("IPv6 is not supported"), std::string::npos);
}

TEST_F(FabricCli, AfterARestartOnlyTheActiveListIsAnswered) {
  ASSERT_EQ(Tessera(Fabric("activate 5")).status, 0);
  fm_.Restart();
  Ran waiting = Tessera(Fabric("partitions --root " + MaterializeHost("no-gpu")));
  EXPECT_EQ(waiting.status, 4) << waiting.out;
  EXPECT_NE(waiting.out.find("FM_ST_NOT_CONFIGURED (-8): the fabric manager is still "
                             "initialising, or restarted and waits for the active partition list "
                             "(tessera fabric set-active)"),
            std::string::npos)
      << waiting.out;
  Ran told = Tessera(Fabric("set-active 5 6"));
  ASSERT_EQ(told.status, 0) << told.out;
  EXPECT_EQ(fm_.Active(), (std::vector<int>{5, 6}));
  EXPECT_EQ(fm_.Get("mode"), "shared");
  // The empty list is sendable too.
  fm_.Restart();
  Ran empty = Tessera(Fabric("set-active"));
  ASSERT_EQ(empty.status, 0) << empty.out;
  EXPECT_TRUE(fm_.Active().empty());
  EXPECT_EQ(fm_.Succeeded("fmSetActivatedFabricPartitions").back().argument, "[]");
  Ran overlapping = Tessera(Fabric("set-active 2 5"));
  EXPECT_EQ(overlapping.status, 2) << overlapping.out;
}

TEST_F(FabricCli, OlderFabricManagersGetTheV1ConnectStructure) {
  fm_.Set("connect", "v1");
  ASSERT_EQ(Tessera(Fabric("activate 8")).status, 0);
  auto connects = fm_.Calls();
  ASSERT_GE(connects.size(), 2u);
  EXPECT_EQ(connects[0].rc, -6);
  EXPECT_EQ(connects[1].argument, "v1:" + kSocket);
}

TEST_F(FabricCli, ServiceVmWritesOneDomainAndItsConfig) {
  const std::string out = dir_.path() + "/vm";
  Ran written = Tessera("fabric service-vm --root " + MaterializeHost("hgx-h100-vfio") +
                        " --output-dir " + out + " --name fm-test --fm-address 192.168.122.40");
  ASSERT_EQ(written.status, 0) << written.out;
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(out))
    files.push_back(entry.path().filename().string());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"fabricmanager.cfg", "fm-test.xml"}));
  int status = -1;
  std::string valid = RunCommand("virt-xml-validate " + out + "/fm-test.xml domain 2>&1", &status);
  EXPECT_EQ(status, 0) << valid;
  EXPECT_NE(ReadFile(out + "/fabricmanager.cfg").find("FM_CMD_BIND_INTERFACE=192.168.122.40\n"),
            std::string::npos);
  EXPECT_NE(written.out.find("5 PCI functions"), std::string::npos) << written.out;
}

TEST_F(FabricCli, ServiceVmRefusesABoardWithoutNvswitchFunctions) {
  TempHost host("hgx-h100-vfio");
  const std::string devices = host.root() + "/sys/bus/pci/devices/";
  for (const char* gone :
       {"0000:03:00.1", "0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"})
    std::filesystem::remove(devices + gone);
  for (const char* gpu : {"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
                          "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"})
    std::ofstream(devices + gpu + "/device", std::ios::trunc) << "0x2901\n";
  const std::string out = dir_.path() + "/b200";
  Ran refused = Tessera("fabric service-vm --root " + host.root() + " --output-dir " + out);
  EXPECT_EQ(refused.status, 5) << refused.out;
  EXPECT_NE(refused.out.find("B200/B300 board, which has no NVSwitch PCI functions"),
            std::string::npos)
      << refused.out;
  EXPECT_FALSE(std::filesystem::exists(out + "/tessera-fabric-manager.xml"));
}

TEST_F(FabricCli, DoctorChecksTheServiceVmTheFabricManagerAndTheLeases) {
  const std::string root = MaterializeHost("hgx-h100-vfio");
  const std::string leases = dir_.path() + "/leases.json";
  // GPUs 0000:2a (module 1) and 0000:18 (module 3) leased: partition 3 {1,3} must be active.
  std::ofstream(leases) << R"({"version":1,"gpus":{"0000:2a:00.0":{"state":"active"},)"
                           R"("0000:18:00.0":{"state":"active"}}})";
  const std::string cfg = dir_.path() + "/fabricmanager.cfg";
  std::ofstream(cfg) << "FABRIC_MODE=1\nFABRIC_MODE_RESTART=1\nFM_CMD_UNIX_SOCKET_PATH=/x\n";
  const std::string flags = " --root " + root + " --fabric-manager " + kSocket +
                            " --nvfm-library " + FAKE_NVFM + " --partition-table " +
                            WriteVfioTable(dir_.path()) + " --lease-file " + leases +
                            " --fabricmanager-config " + cfg +
                            " --podman-version 4.3.1 "
                            "--containerd-version 1.7.0 --format json";
  auto verdicts = [&](const Ran& run) {
    std::map<std::string, std::string> out;
    const json doc = json::parse(run.out);
    for (const auto& check : doc["checks"])
      out[check["id"]] = check["verdict"];
    return out;
  };
  Ran missing = Tessera("doctor" + flags);
  auto before = verdicts(missing);
  EXPECT_EQ(before["fabric.nvswitch_vfio"], "PASS") << missing.out;
  EXPECT_EQ(before["fabric.manager"], "PASS");
  EXPECT_EQ(before["fabric.leases"], "FAIL");
  EXPECT_EQ(before["fabric.config"], "PASS");
  EXPECT_EQ(missing.status, 1);
  fm_.Set("active", "3");
  Ran matched = Tessera("doctor" + flags);
  EXPECT_EQ(verdicts(matched)["fabric.leases"], "PASS") << matched.out;
  fm_.Restart();
  EXPECT_EQ(verdicts(Tessera("doctor" + flags))["fabric.manager"], "WARN");
}

TEST_F(FabricCli, AListServeWouldRefuseIsShownAndFailsWithEveryReason) {
  // Partition 1 twice, module 1 twice in partition 2, module 17 nobody has, a bus ID that is no
  // address never reaches here (the stand-in reports zeroed ones).
  fm_.Set("partitions", "0=1,2 1=3 1=4 2=1,1 3=17 4=5");
  Ran listed = Tessera(Fabric("partitions --root " + MaterializeHost("no-gpu")));
  EXPECT_EQ(listed.status, 5) << listed.out;
  EXPECT_NE(listed.out.find("PARTITION ID  STATUS"), std::string::npos) << listed.out;
  EXPECT_NE(listed.out.find("tessera: the fabric manager's partition list is unusable: "
                            "partition ID 1 is listed twice (entries 2 and 3); partition 2: "
                            "module 1 is listed twice; partition 3: unknown module ID 17 "
                            "(modules 1..16) (tessera serve --fabric-manager refuses to start on "
                            "it)\n"),
            std::string::npos)
      << listed.out;
  Ran json = Tessera(Fabric("partitions --format json --root " + MaterializeHost("no-gpu")));
  EXPECT_EQ(json.status, 5) << json.out;
  // The usable built-in list passes the same check.
  fm_.Set("partitions", "");
  EXPECT_EQ(Tessera(Fabric("partitions --root " + MaterializeHost("no-gpu"))).status, 0);
}

TEST_F(FabricCli, SetActiveRefusesDuplicateIdsBeforeSendingAnything) {
  fm_.Restart();
  Ran twice = Tessera(Fabric("set-active 1 1 1"));
  EXPECT_EQ(twice.status, 2) << twice.out;
  EXPECT_EQ(twice.out,
            "tessera: active partition list: partition 1 is given twice; each active partition "
            "is named once\n");
  EXPECT_TRUE(fm_.Calls().empty()) << "something reached the fabric manager";
  EXPECT_EQ(fm_.Get("mode"), "restart");
}

TEST_F(FabricCli, AHungFabricManagerFailsTheCommandAtItsDeadline) {
  fm_.Set("hang", "activate");
  const auto start = std::chrono::steady_clock::now();
  Ran hung = Tessera(Fabric("activate 3 --fabric-manager-timeout 500ms"));
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(hung.status, 4) << hung.out;
  EXPECT_NE(hung.out.find("fmActivateFabricPartition(3): no answer within 500 ms"),
            std::string::npos)
      << hung.out;
  // The deadline and a loaded machine's slack, far below the hang (which lasts until cleared).
  EXPECT_LT(waited, std::chrono::seconds(30));
  EXPECT_EQ(fm_.Get("hang"), "activate");
  fm_.Set("hang", "list");
  Ran listing =
      Tessera(Fabric("partitions --fabric-manager-timeout 1s --root " + MaterializeHost("no-gpu")));
  EXPECT_EQ(listing.status, 4) << listing.out;
  EXPECT_NE(listing.out.find("fmGetSupportedFabricPartitions: no answer within 1s"),
            std::string::npos)
      << listing.out;
  fm_.Set("hang", "none");
  EXPECT_TRUE(fm_.Active().empty());
  // Deadlines outside 100ms..5m are refused as usage errors.
  EXPECT_NE(Tessera(Fabric("activate 3 --fabric-manager-timeout 10ms")).status, 0);
  EXPECT_NE(Tessera(Fabric("activate 3 --fabric-manager-timeout 6m")).status, 0);
  EXPECT_EQ(Tessera(Fabric("activate 3 --fabric-manager-timeout 2s")).status, 0);
}

}  // namespace
}  // namespace tessera::testing

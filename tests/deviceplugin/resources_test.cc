// The resource manager without sockets: config and lease parsing, naming rules, CDI names,
// replicas, Allocate outputs, preferred sets and health, on the materialized fixture hosts.
#include <gtest/gtest.h>

#include <algorithm>

#include "deviceplugin/deviceplugin.h"
#include "support/fixture_host.h"

namespace tessera::deviceplugin {
namespace {

using testing::MaterializeHost;

inventory::Inventory Read(const std::string& fixture) {
  inventory::ReadOptions options;
  options.root = MaterializeHost(fixture);
  auto inv = inventory::ReadInventory(options);
  EXPECT_TRUE(inv.ok());
  return *inv;
}

std::unique_ptr<ResourceManager> Manager(
    const std::string& fixture, const Config& config = {},
    const std::optional<topology::PartitionTable>& table = {}) {
  auto manager = ResourceManager::Create(Read(fixture), config, table);
  EXPECT_TRUE(manager.ok()) << manager.error().message;
  return std::move(*manager);
}

std::vector<std::string> Names(const ResourceManager& manager) {
  std::vector<std::string> names;
  for (const auto& r : manager.resources())
    names.push_back(r.name);
  return names;
}

// ---- config ----

TEST(Config, DefaultsWhenEmpty) {
  auto config = ParseConfig("");
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->socket_dir, "/var/lib/kubelet/device-plugins");
  EXPECT_EQ(config->device_list_strategy, std::vector<ListStrategy>{ListStrategy::kCdiCri});
  // The fault table classifies Xids (application faults change no health); none is ignored on
  // top of it unless the operator says so.
  EXPECT_TRUE(config->health.ignored_xids.empty());
  EXPECT_EQ(config->health.reset_command,
            (std::vector<std::string>{"nvidia-smi", "-r", "-i", "{uuid}"}));
  EXPECT_TRUE(config->health.self_test_command.empty());
  EXPECT_EQ(config->health.pod_resources_socket, "/var/lib/kubelet/pod-resources/kubelet.sock");
}

TEST(Config, ParsesFaultHandling) {
  auto config = ParseConfig(R"(
health:
  faultTable: /etc/tessera/xids.yaml
  resetCommand: [/usr/local/bin/reset-gpu, "{pci}"]
  selfTestCommand: [dcgmi, diag, -r, "1", -i, "{index}"]
  podResourcesSocket: ""
  stateFile: /var/lib/x/health.json
  recoveryIntervalMs: 250
)");
  ASSERT_TRUE(config.ok()) << config.error().message;
  EXPECT_EQ(config->health.fault_table, "/etc/tessera/xids.yaml");
  EXPECT_EQ(config->health.reset_command,
            (std::vector<std::string>{"/usr/local/bin/reset-gpu", "{pci}"}));
  EXPECT_EQ(config->health.self_test_command.size(), 6u);
  EXPECT_TRUE(config->health.pod_resources_socket.empty());
  EXPECT_EQ(config->health.state_file, "/var/lib/x/health.json");
  EXPECT_EQ(config->health.recovery_interval_ms, 250);
  auto bad = ParseConfig("health: {recoveryIntervalMs: 1}\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("health.recoveryIntervalMs"), std::string::npos);
}

TEST(Config, ParsesEverySection) {
  auto config = ParseConfig(R"(
version: v1
deviceListStrategy: [cdi-cri, envvar]
allocationPolicy: packed
resources:
  - name: "nvidia.com/{model}"
    match: {vendor: "10de", device: "0x2330", driver: nvidia}
sharing:
  timeSlicing:
    renameByDefault: true
    failRequestsGreaterThanOne: true
    resources:
      - {name: nvidia.com/gpu, replicas: 4, rename: nvidia.com/gpu-ts}
topology: {partitionTable: hgx-h100-8gpu, modules: {1: "0000:18:00.0"}}
health: {pollIntervalMs: 50, nvml: false, ignoredXids: [13, 48]}
grpcThreads: 3
)");
  ASSERT_TRUE(config.ok()) << config.error().message;
  EXPECT_EQ(config->device_list_strategy.size(), 2u);
  EXPECT_EQ(config->allocation_policy, AllocationPolicy::kPacked);
  ASSERT_EQ(config->resources.size(), 1u);
  EXPECT_EQ(*config->resources[0].device_id, 0x2330);
  EXPECT_EQ(config->sharing.resources[0].rename, "nvidia.com/gpu-ts");
  EXPECT_TRUE(config->sharing.fail_requests_greater_than_one);
  EXPECT_EQ(config->topology.modules.at(1), "0000:18:00.0");
  EXPECT_EQ(config->health.ignored_xids, (std::set<uint64_t>{13, 48}));
  EXPECT_FALSE(config->health.nvml);
  EXPECT_EQ(config->grpc_threads, 3);
}

TEST(Config, ErrorsNameTheField) {
  struct Case {
    const char* yaml;
    const char* field;
  } cases[] = {
      {"socketdir: /x\n", "socketdir: unknown field"},
      {"deviceListStrategy: [cdi]\n", "deviceListStrategy"},
      {"sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 1}]}}\n",
       "sharing.timeSlicing.resources[0].replicas"},
      {"resources: [{name: gpu}]\n", "resources[0].name"},
      {"resources: [{name: a.com/b, match: {vendor: xyz}}]\n", "resources[0].match.vendor"},
      {"health: {pollIntervalMs: 5}\n", "health.pollIntervalMs"},
      {"health: {ignoredXids: [a]}\n", "health.ignoredXids[0]"},
      {"topology: {modules: {17: x}}\n", "topology.modules.17"},
      {"allocationPolicy: spread\n", "allocationPolicy"},
      {"version: v2\n", "version"},
      {"health: {nvml: false}\nhealth: {nvml: true}\n", "health: duplicate key"},
      {"[1, 2\n", "config"},
  };
  for (const auto& c : cases) {
    auto config = ParseConfig(c.yaml);
    ASSERT_FALSE(config.ok()) << c.yaml;
    EXPECT_NE(config.error().message.find(c.field), std::string::npos)
        << c.yaml << " -> " << config.error().message;
  }
}

TEST(Config, EnvironmentOverridesTheFile) {
  auto config = ParseConfig("socketDir: /from/file\ndeviceListStrategy: envvar\n");
  ASSERT_TRUE(config.ok());
  ASSERT_TRUE(ApplyEnvironment({{"TESSERA_DP_SOCKET_DIR", "/from/env"},
                                {"TESSERA_DP_DEVICE_LIST_STRATEGY", "device-specs, cdi-cri"}},
                               &*config)
                  .ok());
  EXPECT_EQ(config->socket_dir, "/from/env");
  EXPECT_EQ(config->device_list_strategy,
            (std::vector<ListStrategy>{ListStrategy::kDeviceSpecs, ListStrategy::kCdiCri}));
  Status bad = ApplyEnvironment({{"TESSERA_DP_ALLOCATION_POLICY", "x"}}, &*config);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("TESSERA_DP_ALLOCATION_POLICY"), std::string::npos);
}

TEST(ResourceName, FollowsKubernetesRules) {
  EXPECT_EQ(CheckResourceName("nvidia.com/gpu"), "");
  EXPECT_EQ(CheckResourceName("nvidia.com/GH100_H100_SXM5_80GB"), "");
  EXPECT_NE(CheckResourceName("gpu"), "");
  EXPECT_NE(CheckResourceName("Nvidia.com/gpu"), "");
  EXPECT_NE(CheckResourceName("nvidia.com/-gpu"), "");
  EXPECT_NE(CheckResourceName("nvidia.com/" + std::string(64, 'a')), "");
}

// ---- leases ----

TEST(LeaseFile, ParsesStatesAndRejectsBadInput) {
  auto leases = ParseLeaseFile(
      R"({"version":1,"gpus":{"0000:18:00.0":{"state":"quarantined","reason":"xid 79"},
          "0000:2a:00.0":{"state":"active","tenancy":"t","claim":"uid-1"}}})");
  ASSERT_TRUE(leases.ok()) << leases.error().message;
  EXPECT_EQ(leases->at("0000:18:00.0").state, LeaseState::kQuarantined);
  EXPECT_TRUE(leases->at("0000:18:00.0").blocks_allocation());
  EXPECT_FALSE(leases->at("0000:2a:00.0").blocks_allocation());
  EXPECT_EQ(leases->at("0000:2a:00.0").claim, "uid-1");
  EXPECT_TRUE(ParseLeaseFile(R"({"version":1})").ok());
  for (const char* bad : {R"({"version":2,"gpus":{}})", R"({"gpus":{}})", "[]", "{",
                          R"({"version":1,"gpus":{"18:00.0":{"state":"free"}}})",
                          R"({"version":1,"gpus":{"0000:18:00.0":{"state":"broken"}}})",
                          R"({"version":1,"gpus":{"0000:18:00.0":{}}})",
                          R"({"version":1,"gpus":{"0000:18:00.0":{"state":"free","x":"y"}}})"}) {
    EXPECT_FALSE(ParseLeaseFile(bad).ok()) << bad;
  }
}

TEST(LeaseFile, MissingFileMeansNoLeases) {
  auto leases = ReadLeaseFile("/nonexistent/leases.json");
  ASSERT_TRUE(leases.ok());
  EXPECT_TRUE(leases->empty());
}

// ---- resources ----

TEST(Resources, HgxDriverModeIsEightGpusByUuid) {
  auto manager = Manager("hgx-h100-dgx");
  ASSERT_EQ(Names(*manager), std::vector<std::string>{"nvidia.com/gpu"});
  const Resource& gpu = manager->resources()[0];
  ASSERT_EQ(gpu.ids.size(), 8u);
  EXPECT_EQ(gpu.ids[0], "GPU-5e4b7c10-3c2a-4d8e-9f10-a1b2c3d4e5f0");
  EXPECT_EQ(gpu.socket_name, "tessera-nvidia-com-gpu.sock");
  const auto& device = manager->devices()[gpu.devices[0]];
  EXPECT_EQ(device.cdi_name, "nvidia.com/gpu=GPU-5e4b7c10-3c2a-4d8e-9f10-a1b2c3d4e5f0");
  EXPECT_EQ(device.numa_node, 0);
  ASSERT_TRUE(gpu.chooser);
  EXPECT_FALSE(gpu.chooser->partition_mode());
}

TEST(Resources, VfioHostAdvertisesPgpuAndNvswitch) {
  auto manager = Manager("hgx-h100-vfio");
  auto names = Names(*manager);
  EXPECT_EQ(names, (std::vector<std::string>{"nvidia.com/nvswitch", "nvidia.com/pgpu"}));
  const Resource* pgpu = manager->FindResource("nvidia.com/pgpu");
  ASSERT_TRUE(pgpu);
  EXPECT_EQ(pgpu->ids.size(), 8u);
  // vfio GPUs have no UUID: the PCI address is the ID, and the CDI kind is the vfio spec's.
  EXPECT_EQ(pgpu->ids[0].size(), 12u);
  EXPECT_EQ(manager->devices()[pgpu->devices[0]].cdi_kind, "nvidia.com/pgpu");
  // Every NVSwitch shares one IOMMU group: one CDI device, named once per Allocate.
  const Resource* nvswitch = manager->FindResource("nvidia.com/nvswitch");
  ASSERT_TRUE(nvswitch);
  Config config;
  auto allocation = manager->Allocate(*nvswitch, {nvswitch->ids});
  ASSERT_TRUE(allocation.ok()) << allocation.error().message;
  EXPECT_EQ((*allocation)[0].cdi_devices.size(), 1u);
}

TEST(Resources, WorkstationAndAmdDefaults) {
  EXPECT_EQ(Names(*Manager("workstation-intel-nvidia")),
            (std::vector<std::string>{"gpu.intel.com/i915", "nvidia.com/gpu"}));
  EXPECT_EQ(Names(*Manager("amd-gpu")), std::vector<std::string>{"amd.com/gpu"});
  EXPECT_TRUE(Names(*Manager("no-gpu")).empty());
}

TEST(Resources, PerModelNamingRule) {
  Config config;
  NamingRule rule;
  rule.name = "nvidia.com/{model}";
  rule.vendor_id = 0x10de;
  rule.driver = "nvidia";
  config.resources.push_back(rule);
  auto manager = Manager("hgx-h100-dgx", config);
  ASSERT_EQ(manager->resources().size(), 1u);
  // pci.ids calls it "GH100 [H100 SXM5 80GB]".
  EXPECT_EQ(manager->resources()[0].name, "nvidia.com/GH100_H100_SXM5_80GB");
  EXPECT_EQ(manager->resources()[0].ids.size(), 8u);  // NVSwitches are not GPUs: no match
  // A rule matching by model glob wins over the default; others fall through to defaults.
  Config split;
  NamingRule rtx;
  rtx.name = "nvidia.com/rtx";
  rtx.model = "*4090*";
  split.resources.push_back(rtx);
  EXPECT_EQ(Names(*Manager("workstation-intel-nvidia", split)),
            (std::vector<std::string>{"gpu.intel.com/i915", "nvidia.com/rtx"}));
}

TEST(Resources, AllocateDeduplicatesReplicasAndRefusesUnknownIds) {
  Config config;
  config.device_list_strategy = {ListStrategy::kCdiCri, ListStrategy::kEnvvar};
  config.sharing.resources.push_back({"nvidia.com/gpu", 2, ""});
  auto manager = Manager("hgx-h100-dgx", config);
  const Resource& gpu = manager->resources()[0];
  EXPECT_EQ(gpu.ids.size(), 16u);
  auto allocation = manager->Allocate(gpu, {{gpu.ids[0], gpu.ids[1], gpu.ids[2]}});
  ASSERT_TRUE(allocation.ok());
  EXPECT_EQ((*allocation)[0].cdi_devices.size(), 2u);
  EXPECT_EQ((*allocation)[0].envs.at("NVIDIA_VISIBLE_DEVICES"),
            manager->devices()[0].id + "," + manager->devices()[1].id);
  auto bad = manager->Allocate(gpu, {{"nope::0"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().category, ErrorCategory::kInvalidArgument);
  EXPECT_NE(bad.error().message.find("nope::0"), std::string::npos);
}

TEST(Health, PresenceFaultsAndLeasesEachMakeADeviceUnhealthy) {
  auto manager = Manager("hgx-h100-dgx");
  const Resource& gpu = manager->resources()[0];
  uint64_t generation = 0;
  manager->List(gpu, &generation);
  const std::string pci = manager->devices()[1].pci_address;

  EXPECT_TRUE(manager->SetPresence({{pci, false}}));
  EXPECT_NE(manager->WaitForChange(generation, std::chrono::steady_clock::now()), generation);
  EXPECT_FALSE(manager->List(gpu, nullptr)[1].healthy);
  EXPECT_FALSE(manager->SetPresence({{pci, false}}));  // no change, no update
  EXPECT_TRUE(manager->SetPresence({{pci, true}}));
  EXPECT_TRUE(manager->List(gpu, nullptr)[1].healthy);

  const std::string reason = "gpu-fault: Xid 79 (GPU has fallen off the bus) on " + pci;
  EXPECT_TRUE(manager->SetFault(pci, health::kWholeGpu, reason));
  EXPECT_FALSE(manager->SetFault(pci, health::kWholeGpu, reason));  // no change, no update
  EXPECT_FALSE(manager->List(gpu, nullptr)[1].healthy);
  EXPECT_TRUE(manager->List(gpu, nullptr)[2].healthy);
  auto refused = manager->Allocate(gpu, {{gpu.ids[1]}});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("Xid 79"), std::string::npos);
  // Gone and back is no recovery: only a verified reset clears a fault.
  manager->SetPresence({{pci, false}});
  manager->SetPresence({{pci, true}});
  EXPECT_FALSE(manager->List(gpu, nullptr)[1].healthy);
  EXPECT_TRUE(manager->ClearFault(pci));
  EXPECT_TRUE(manager->List(gpu, nullptr)[1].healthy);
  EXPECT_FALSE(manager->ClearFault(pci));
  EXPECT_EQ(manager->AdvertisedIds(pci, health::kWholeGpu),
            (std::vector<std::pair<std::string, std::string>>{{gpu.name, gpu.ids[1]}}));

  LeaseMap leases;
  leases[pci] = Lease{LeaseState::kDraining, "node drain", ""};
  EXPECT_TRUE(manager->SetLeases(leases));
  EXPECT_FALSE(manager->List(gpu, nullptr)[1].healthy);
  EXPECT_NE(manager->Health(1).Describe().find("draining"), std::string::npos);
  EXPECT_TRUE(manager->SetLeases({}));
  EXPECT_TRUE(manager->List(gpu, nullptr)[1].healthy);
}

TEST(Health, ProbePresenceSeesTheFixtureDevices) {
  auto manager = Manager("hgx-h100-dgx");
  auto presence = ProbePresence(manager->devices());
  ASSERT_EQ(presence.size(), 8u);
  for (const auto& [pci, present] : presence)
    EXPECT_TRUE(present) << pci;
}

TEST(Preferred, PartitionTableGivesWholePartitions) {
  TopologyConfig topo;
  topo.partition_table = "hgx-h100-8gpu";
  const char* bus[9] = {"",
                        "0000:3a:00.0",
                        "0000:5d:00.0",
                        "0000:18:00.0",
                        "0000:2a:00.0",
                        "0000:db:00.0",
                        "0000:ba:00.0",
                        "0000:ab:00.0",
                        "0000:9a:00.0"};
  for (int m = 1; m <= 8; ++m)
    topo.modules[m] = bus[m];
  auto table = LoadPartitionTable(topo);
  ASSERT_TRUE(table.ok()) << table.error().message;
  auto manager = Manager("hgx-h100-dgx", {}, *table);
  const Resource& gpu = manager->resources()[0];
  ASSERT_TRUE(gpu.chooser && gpu.chooser->partition_mode()) << gpu.chooser_note;
  auto chosen = manager->Preferred(gpu, {gpu.ids, {}, 8});
  ASSERT_TRUE(chosen.ok());
  EXPECT_EQ(chosen->size(), 8u);
  // Size 3 is not a partition size: the scorer still answers with 3 GPUs.
  chosen = manager->Preferred(gpu, {gpu.ids, {gpu.ids[7]}, 3});
  ASSERT_TRUE(chosen.ok()) << chosen.error().message;
  EXPECT_EQ(chosen->size(), 3u);
  EXPECT_NE(std::find(chosen->begin(), chosen->end(), gpu.ids[7]), chosen->end());
  // A table for other GPUs falls back to scoring, with a note saying why.
  topo.modules[1] = "0000:77:00.0";
  auto other = LoadPartitionTable(topo);
  ASSERT_TRUE(other.ok());
  auto scored = Manager("hgx-h100-dgx", {}, *other);
  EXPECT_FALSE(scored->resources()[0].chooser->partition_mode());
  EXPECT_NE(scored->resources()[0].chooser_note.find("does not map"), std::string::npos);
}

TEST(Preferred, RejectsSizesLargerThanAvailable) {
  auto manager = Manager("hgx-h100-dgx");
  const Resource& gpu = manager->resources()[0];
  auto chosen = manager->Preferred(gpu, {{gpu.ids[0]}, {}, 2});
  ASSERT_FALSE(chosen.ok());
  EXPECT_EQ(chosen.error().category, ErrorCategory::kInvalidArgument);
}

}  // namespace
}  // namespace tessera::deviceplugin

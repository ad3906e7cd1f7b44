// The device-plugin path's truth: tessera-lease-sync (a real process) reads kubelet's
// PodResources List over a real unix socket (the emulator) and writes the devices kubelet gave a
// leased Pod into the GpuLease's status.allocatedDevices on the scripted API server; the lease
// controller then records a difference from the lease and checks the union of both.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "backends/kubernetes/controller.h"
#include "backends/kubernetes/node_gpus.h"
#include "backends/kubernetes/objects.h"
#include "client/client.h"
#include "inventory/inventory.h"
#include "kubernetes/client.h"
#include "kubernetes/fake_apiserver.h"
#include "kubernetes/lease_sync_process.h"
#include "kubernetes/plain_config.h"
#include "podresources/podresources_kubelet.h"
#include "support/fake_fabric_manager.h"
#include "support/fake_nvml_state.h"
#include "support/fixture_host.h"
#include "support/wait.h"

namespace tessera::k8s {
namespace {

using testing::FakeApiServer;
using testing::LeaseSyncProcess;
using testing::PodResourcesKubelet;
using testing::TempDir;

std::vector<std::string> Command(const Json& job) {
  return job["spec"]["template"]["spec"]["containers"][0]["command"]
      .get<std::vector<std::string>>();
}

std::vector<std::string> CheckedGpus(const Json& job) {
  std::vector<std::string> gpus;
  auto command = Command(job);
  for (size_t i = 0; i + 1 < command.size(); ++i) {
    if (command[i] == "--gpu") gpus.push_back(command[i + 1]);
  }
  return gpus;
}

// The scripted API server with a kubeconfig and a client, and the HGX fixture's GPUs.
struct NodeUnderTest {
  NodeUnderTest() {
    server.SetWatchSeconds(0.5);
    testing::WriteKubeconfigFile(dir.path() + "/kubeconfig", server.url());
    client = std::make_unique<Client>(testing::PlainConfig(server));
    root = testing::MaterializeHost("hgx-h100-dgx");
    inventory::ReadOptions read;
    read.root = root;
    auto read_inventory = inventory::ReadInventory(read);
    EXPECT_TRUE(read_inventory.ok());
    if (read_inventory.ok()) inv = std::move(*read_inventory);
  }
  std::vector<const inventory::PciDevice*> Gpus() const { return inv.Gpus(); }

  FakeApiServer server;
  TempDir dir;
  std::unique_ptr<Client> client;
  std::string root;
  inventory::Inventory inv;
};

TEST(LeaseSyncPodResources, KubeletsDevicesReachTheLeaseAndTheCheckCoversBothSides) {
  NodeUnderTest node;
  TempDir& dir = node.dir;
  Client& client = *node.client;
  const std::string& root = node.root;
  auto gpus = node.Gpus();
  ASSERT_GE(gpus.size(), 6u);
  for (int i : {0, 1, 2, 5})
    ASSERT_TRUE(gpus[i]->gpu_uuid.has_value());

  PodRequest request;
  request.tenancy = "team-a";
  request.name = "train-1";
  request.image = "cuda";
  request.gpus = 2;
  request.node = "node-1";
  request.lease_name = "lease-train-1";
  LeaseSpec lease = {"lease-train-1", "team-a",
                     "node-1",        {gpus[0]->pci_address, gpus[1]->pci_address},
                     "tenant-team-a", "train-1"};
  ASSERT_TRUE(StartPod(client, request, {}, lease).ok());

  // kubelet gave the Pod GPU 0 and GPU 2 (by the device plugin's UUID IDs, one as a replica),
  // not the leased GPU 1; another node-local Pod holds GPU 5.
  PodResourcesKubelet kubelet(dir.path() + "/kubelet.sock");
  ASSERT_TRUE(kubelet.ok());
  kubelet.SetPods({{"tenant-team-a",
                    "train-1",
                    {{"main", "nvidia.com/gpu", {*gpus[0]->gpu_uuid, *gpus[2]->gpu_uuid + "::1"}},
                     {"main", "example.com/nic", {"nic-0"}}}},
                   {"default", "other", {{"c", "nvidia.com/gpu", {*gpus[5]->gpu_uuid}}}}});
  LeaseSyncProcess sync({"--kubeconfig", dir.path() + "/kubeconfig", "--node", "node-1",
                         "--lease-file", dir.path() + "/leases.json", "--root", root,
                         "--inventory-interval-ms", "0", "--pod-resources-socket",
                         kubelet.socket_path(), "--pod-resources-interval-ms", "100"});

  const std::vector<std::string> allocated = {gpus[0]->pci_address, gpus[2]->pci_address};
  auto lease_status = [&] {
    auto live = client.Get(Resource::GpuLeases(), "", "lease-train-1");
    return live ? (*live).value("status", Json::object()) : Json::object();
  };
  ASSERT_TRUE(testing::WaitUntil([&] {
    return lease_status().value("allocatedDevices", Json::array()) == Json(allocated);
  })) << lease_status().dump();
  EXPECT_GT(kubelet.ListCalls(), 0);

  FirmwareCheckOptions check;
  auto live = client.Get(Resource::GpuLeases(), "", "lease-train-1");
  ASSERT_TRUE(live.ok());
  // While the Pod runs, the difference is recorded on the lease.
  EXPECT_EQ(*ReconcileLease(client, *live, check), "active");
  std::string reason = lease_status().value("reason", "");
  EXPECT_NE(
      reason.find("kubelet allocated [" + gpus[0]->pci_address + "," + gpus[2]->pci_address + "]"),
      std::string::npos)
      << reason;
  EXPECT_NE(
      reason.find("the lease names [" + gpus[0]->pci_address + "," + gpus[1]->pci_address + "]"),
      std::string::npos)
      << reason;

  // When it ends, the firmware check covers the leased and the allocated GPUs.
  ASSERT_TRUE(client
                  .Patch(Resource::Pods(), "tenant-team-a", "train-1",
                         {{"status", {{"phase", "Succeeded"}}}}, PatchType::kMerge, "status")
                  .ok());
  live = client.Get(Resource::GpuLeases(), "", "lease-train-1");
  EXPECT_EQ(*ReconcileLease(client, *live, check), "checking");
  auto job = client.Get(Resource::Jobs(), check.namespace_, FirmwareCheckJobName("lease-train-1"));
  ASSERT_TRUE(job.ok());
  std::vector<std::string> expected = {gpus[0]->pci_address, gpus[1]->pci_address,
                                       gpus[2]->pci_address};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(CheckedGpus(*job), expected);
  EXPECT_NE(lease_status().value("reason", "").find("kubelet allocated"), std::string::npos);
}

// Shared NVSwitch mode on a device-plugin cluster: the node agent activates a leased Pod's
// partition when kubelet reports its devices, deactivates it when they are gone, and leaves alone
// what belongs to no lease until the leases are known.
TEST(LeaseSyncFabric, ALeasedPodsPartitionFollowsItsDevicesInPodResources) {
  testing::FakeFabricManager fm("unix:/run/nvidia-fabricmanager/socket");
  testing::FakeNvmlState nvml("hgx-h100-dgx");
  NodeUnderTest node;
  TempDir& dir = node.dir;
  Client& client = *node.client;
  const std::string& root = node.root;
  auto gpus = node.Gpus();
  ASSERT_EQ(gpus.size(), 8u);

  // GPUs 0000:9a (module 7) and 0000:ab (module 5): partition 5 {5,7}.
  PodRequest request;
  request.tenancy = "team-a";
  request.name = "train-2";
  request.image = "cuda";
  request.gpus = 2;
  request.node = "node-1";
  request.lease_name = "lease-train-2";
  LeaseSpec lease = {"lease-train-2", "team-a",
                     "node-1",        {gpus[4]->pci_address, gpus[5]->pci_address},
                     "tenant-team-a", "train-2"};
  ASSERT_TRUE(StartPod(client, request, {}, lease).ok());
  PodResourcesKubelet kubelet(dir.path() + "/kubelet.sock");
  ASSERT_TRUE(kubelet.ok());
  fm.Set("active", "3");  // left from before: nothing holds it
  LeaseSyncProcess sync({"--kubeconfig",
                         dir.path() + "/kubeconfig",
                         "--node",
                         "node-1",
                         "--lease-file",
                         dir.path() + "/leases.json",
                         "--root",
                         root,
                         "--inventory-interval-ms",
                         "0",
                         "--pod-resources-socket",
                         kubelet.socket_path(),
                         "--pod-resources-interval-ms",
                         "0",
                         "--fabric-manager",
                         "unix:/run/nvidia-fabricmanager/socket",
                         "--nvfm-library",
                         FAKE_NVFM,
                         "--nvml",
                         FAKE_NVML,
                         "--fabric-state",
                         dir.path() + "/fabric.json",
                         "--fabric-interval-ms",
                         "100",
                         "--telemetry-interval-ms",
                         "300",
                         "--metrics-listen",
                         "127.0.0.1:0"},
                        dir.path() + "/agent.log");
  // Nothing holds partition 3 once the leases are known.
  ASSERT_TRUE(testing::WaitUntil([&] { return fm.Active().empty(); })) << fm.Get("active");
  // kubelet starts the Pod: its devices appear.
  kubelet.SetPods({{"tenant-team-a",
                    "train-2",
                    {{"main", "nvidia.com/gpu", {*gpus[4]->gpu_uuid, *gpus[5]->gpu_uuid}}}}});
  ASSERT_TRUE(testing::WaitUntil([&] { return fm.Active() == std::vector<int>{5}; }))
      << fm.Get("active");
  // The fabric manager restarts: the node agent sends it the active list.
  fm.Restart();
  ASSERT_TRUE(testing::WaitUntil([&] { return fm.Get("mode") == "shared"; }));
  EXPECT_EQ(fm.Active(), (std::vector<int>{5}));
  // ... and counts it on its /metrics.
  const uint16_t port = sync.MetricsPort();
  ASSERT_NE(port, 0) << sync.Log();
  EXPECT_TRUE(testing::WaitUntil([&] {
    client::Connection connection({"127.0.0.1", port});
    auto response = connection.Call("GET", "/metrics");
    return response &&
           response->body.find("tessera_fabric_manager_restarts_total 1\n") != std::string::npos;
  })) << sync.Log();
  // The Pod ends: its devices are gone from PodResources.
  kubelet.SetPods({});
  ASSERT_TRUE(testing::WaitUntil([&] { return fm.Active().empty(); })) << fm.Get("active");
  EXPECT_EQ(fm.Succeeded("fmActivateFabricPartition").size(), 1u);
}

TEST(LeaseAllocation, MatchingAllocationIsNoDifferenceAndUnknownIdsStayVisible) {
  LeaseSpec lease;
  lease.gpu_ids = {"0000:2a:00.0", "0000:18:00.0"};
  EXPECT_EQ(AllocationDifference(lease), "");  // not reported yet
  lease.allocated_devices = {"0000:18:00.0", "0000:2a:00.0"};
  EXPECT_EQ(AllocationDifference(lease), "");
  EXPECT_EQ(DevicesToCheck(lease), (std::vector<std::string>{"0000:18:00.0", "0000:2a:00.0"}));

  NodeGpus node;
  node.gpus.push_back({"0000:18:00.0", "GPU-aaaa", "H100", 0, {}, {}});
  node.gpus.push_back({"0000:2a:00.0", "", "H100", 0, {}, {}});
  // UUIDs, PCI addresses and replicas map to PCI; an unknown ID stays as it is.
  EXPECT_EQ(PciAddressesOfDeviceIds({"GPU-aaaa::3", "0000:2a:00.0", "GPU-zzzz"}, node),
            (std::vector<std::string>{"0000:18:00.0", "0000:2a:00.0", "GPU-zzzz"}));
  lease.allocated_devices = {"0000:18:00.0", "GPU-zzzz"};
  EXPECT_NE(AllocationDifference(lease).find("GPU-zzzz"), std::string::npos);
  EXPECT_EQ(DevicesToCheck(lease),
            (std::vector<std::string>{"0000:18:00.0", "0000:2a:00.0", "GPU-zzzz"}));
}

}  // namespace
}  // namespace tessera::k8s

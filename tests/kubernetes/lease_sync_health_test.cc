// GPU faults on a Kubernetes node: tessera-lease-sync (a real process) watches the stand-in
// NVML's GPUs, publishes a faulted GPU in its Node's GPU listing at once, waits until kubelet's
// allocations (PodResources, emulated on a real socket) show no Pod on it, resets it through the
// configured command (the stand-in nvidia-smi, which records its resets and clears what waits
// for one), and publishes it healthy again. The recovery step survives kill -9 of the agent.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>

#include "backends/kubernetes/node_gpus.h"
#include "dra/dra.h"
#include "inventory/inventory.h"
#include "kubernetes/client.h"
#include "kubernetes/fake_apiserver.h"
#include "kubernetes/lease_sync_process.h"
#include "kubernetes/plain_config.h"
#include "podresources/podresources_kubelet.h"
#include "support/fake_nvml_state.h"
#include "support/fixture_host.h"
#include "support/wait.h"

namespace tessera::k8s {
namespace {

using testing::FakeApiServer;
using testing::LeaseSyncProcess;
using testing::PodResourcesKubelet;
using testing::TempDir;

class LeaseSyncHealthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_.SetWatchSeconds(0.5);
    testing::WriteKubeconfigFile(dir_.path() + "/kubeconfig", server_.url());
    client_ = std::make_unique<Client>(testing::PlainConfig(server_));
    ASSERT_TRUE(client_
                    ->Create(Resource::Nodes(), "",
                             {{"apiVersion", "v1"},
                              {"kind", "Node"},
                              {"metadata", {{"name", "node-1"}, {"labels", {{"a", "b"}}}}}})
                    .ok());
    root_ = testing::MaterializeHost("hgx-h100-dgx");
    inventory::ReadOptions read;
    read.root = root_;
    auto inv = inventory::ReadInventory(read);
    ASSERT_TRUE(inv.ok());
    for (const auto* gpu : inv->Gpus())
      gpus_.push_back({gpu->pci_address, gpu->gpu_uuid.value_or("")});
    ASSERT_GE(gpus_.size(), 2u);
    ASSERT_FALSE(gpus_[0].second.empty());
  }

  // `telemetry_ms`: its telemetry (NVML held between resets) every so often; "0": none.
  std::unique_ptr<LeaseSyncProcess> StartAgent(const std::string& socket,
                                               const std::string& telemetry_ms = "0") {
    return std::make_unique<LeaseSyncProcess>(
        std::vector<std::string>{"--kubeconfig",
                                 dir_.path() + "/kubeconfig",
                                 "--node",
                                 "node-1",
                                 "--lease-file",
                                 dir_.path() + "/leases.json",
                                 "--root",
                                 root_,
                                 "--inventory-interval-ms",
                                 "0",
                                 "--pod-resources-socket",
                                 socket,
                                 "--pod-resources-interval-ms",
                                 "0",
                                 "--telemetry-interval-ms",
                                 telemetry_ms,
                                 "--nvml",
                                 FAKE_NVML,
                                 "--gpu-health-state",
                                 dir_.path() + "/gpu-health.json",
                                 "--gpu-reset-command",
                                 std::string(FAKE_NVIDIA_SMI) + " -r -i {uuid}",
                                 "--gpu-recovery-interval-ms",
                                 "100"},
        dir_.path() + "/agent.log");
  }

  // The GPUs the Node publishes now (nullopt: none yet).
  std::optional<NodeGpus> Published() {
    auto node = client_->Get(Resource::Nodes(), "", "node-1");
    if (!node) return std::nullopt;
    auto gpus = NodeGpusOf(*node);
    if (!gpus.ok() || !gpus->has_value()) return std::nullopt;
    return **gpus;
  }
  health::GpuHealth PublishedHealth(size_t gpu) {
    auto published = Published();
    if (!published || published->gpus.size() <= gpu) return {};
    return published->gpus[gpu].health;
  }
  void Xid(size_t gpu, int xid) { faults_.AddEvent(gpus_[gpu].first + " " + std::to_string(xid)); }
  void ClearEvents() const { std::ofstream(faults_.events_path(), std::ios::trunc); }
  std::string Resets() const { return faults_.ResetLog(); }
  std::string ResetOf(size_t gpu) const {
    return "reset " + gpus_[gpu].second + " " + gpus_[gpu].first + " -> 0\n";
  }
  podresources::PodDevices PodOn(size_t gpu) const {
    return {"tenant-team-a", "train-1", {{"main", "nvidia.com/gpu", {gpus_[gpu].second}}}};
  }

  FakeApiServer server_;
  TempDir dir_;
  std::unique_ptr<Client> client_;
  std::string root_;
  std::vector<std::pair<std::string, std::string>> gpus_;  // PCI address, UUID
  testing::FakeNvmlState nvml_{"hgx-h100-dgx"};
  testing::FakeNvmlFaults faults_;
};

TEST_F(LeaseSyncHealthTest, AFaultIsPublishedAtOnceAndTheGpuIsResetOnceNoPodHoldsIt) {
  PodResourcesKubelet kubelet(dir_.path() + "/kubelet.sock");
  ASSERT_TRUE(kubelet.ok());
  kubelet.SetPods({PodOn(0)});
  // With telemetry on: it lets go of NVML for the reset, which the stand-in would refuse.
  auto agent = StartAgent(kubelet.socket_path(), "200");
  ASSERT_TRUE(testing::WaitUntil([&] { return Published().has_value(); })) << agent->Log();
  ASSERT_TRUE(testing::WaitUntil([&] {
    return agent->Log().find("watching") != std::string::npos;
  })) << agent->Log();
  const std::string version_before =
      (*client_->Get(Resource::Nodes(), "", "node-1"))["metadata"]["resourceVersion"];

  // Xid 79 on GPU 0: the listing shows it faulted, with the reason; the others stay healthy.
  Xid(0, 79);
  ASSERT_TRUE(testing::WaitUntil([&] {
    return PublishedHealth(0).step == health::RecoveryStep::kDraining;
  })) << agent->Log();
  health::GpuHealth faulted = PublishedHealth(0);
  EXPECT_NE(faulted.reason.find("Xid 79"), std::string::npos) << faulted.reason;
  EXPECT_NE(faulted.reason.find(gpus_[0].first), std::string::npos) << faulted.reason;
  ASSERT_EQ(faulted.history.size(), 1u);
  EXPECT_EQ(faulted.history[0].xid, 79u);
  EXPECT_GT(faulted.faulted_ms, 0);
  for (size_t i = 1; i < gpus_.size(); ++i)
    EXPECT_TRUE(PublishedHealth(i).in_service()) << i;

  // It has fallen off the bus (until a reset), and kubelet still has a Pod on it: several
  // rounds later, no reset.
  faults_.SetFaults(gpus_[0].first + " lost=1\n");
  const int calls = kubelet.ListCalls();
  ASSERT_TRUE(testing::WaitUntil([&] { return kubelet.ListCalls() >= calls + 3; }));
  EXPECT_EQ(Resets(), "");
  EXPECT_EQ(PublishedHealth(0).step, health::RecoveryStep::kDraining);

  // The Pod is gone: reset (of that GPU only), verified, published healthy with its history.
  kubelet.SetPods({});
  ASSERT_TRUE(testing::WaitUntil([&] { return PublishedHealth(0).in_service(); })) << agent->Log();
  EXPECT_EQ(Resets(), ResetOf(0));
  health::GpuHealth back = PublishedHealth(0);
  // The Xid first; the lost GPU's reads may add "gpu-lost" before the reset.
  ASSERT_FALSE(back.history.empty());
  EXPECT_EQ(back.history.front(), faulted.history.front());
  for (size_t i = 1; i < back.history.size(); ++i)
    EXPECT_EQ(back.history[i].signal, "gpu-lost") << agent->Log();
  EXPECT_EQ(back.faulted_ms, 0);

  // Merge patches of the annotation only: the Node's other metadata stays, and its
  // resourceVersion moved on with each write.
  auto node = client_->Get(Resource::Nodes(), "", "node-1");
  ASSERT_TRUE(node.ok());
  EXPECT_EQ((*node)["metadata"]["labels"]["a"], "b");
  EXPECT_GT(std::stoll((*node)["metadata"]["resourceVersion"].get<std::string>()),
            std::stoll(version_before));
}

// A Pod whose DRA claim holds the GPU (kubelet lists the claim's device, not a device-plugin
// ID) holds it as well: the faulted GPU is reset only once the Pod is gone.
TEST_F(LeaseSyncHealthTest, AGpuADraClaimHoldsIsResetOnlyOnceThePodIsGone) {
  PodResourcesKubelet kubelet(dir_.path() + "/kubelet.sock");
  ASSERT_TRUE(kubelet.ok());
  podresources::PodDevices pod{"tenant-team-a", "train-1", {}, {}};
  pod.claim_devices.push_back({"main", "tenant-team-a", "train-1-gpus", "gpu.tessera.dev", "node-1",
                               dra::DeviceNameFor(gpus_[1].first)});
  kubelet.SetPods({pod});
  auto agent = StartAgent(kubelet.socket_path());
  ASSERT_TRUE(testing::WaitUntil([&] { return Published().has_value(); })) << agent->Log();
  ASSERT_TRUE(testing::WaitUntil([&] {
    return agent->Log().find("watching") != std::string::npos;
  })) << agent->Log();

  // Xid 79 on GPU 1, which runs no process: the claim alone keeps it from a reset.
  Xid(1, 79);
  ASSERT_TRUE(testing::WaitUntil([&] {
    return PublishedHealth(1).step == health::RecoveryStep::kDraining;
  })) << agent->Log();
  const int calls = kubelet.ListCalls();
  ASSERT_TRUE(testing::WaitUntil([&] { return kubelet.ListCalls() >= calls + 3; }));
  EXPECT_EQ(Resets(), "");
  EXPECT_EQ(PublishedHealth(1).step, health::RecoveryStep::kDraining);

  // The Pod is gone: reset, verified, healthy again.
  kubelet.SetPods({});
  ASSERT_TRUE(testing::WaitUntil([&] { return PublishedHealth(1).in_service(); })) << agent->Log();
  EXPECT_EQ(Resets(), ResetOf(1));
}

TEST_F(LeaseSyncHealthTest, ARestartedAgentResumesRecoveryFromItsStateOrItsNode) {
  PodResourcesKubelet kubelet(dir_.path() + "/kubelet.sock");
  ASSERT_TRUE(kubelet.ok());
  kubelet.SetPods({PodOn(1)});
  auto agent = StartAgent(kubelet.socket_path());
  ASSERT_TRUE(testing::WaitUntil([&] {
    return agent->Log().find("watching") != std::string::npos;
  })) << agent->Log();
  Xid(1, 48);
  ASSERT_TRUE(testing::WaitUntil([&] {
    return PublishedHealth(1).step == health::RecoveryStep::kDraining;
  })) << agent->Log();
  const health::GpuHealth faulted = PublishedHealth(1);

  // kill -9 while the Pod still holds it; the restarted agent keeps it out (its state file). A
  // new process's NVML hands it only events after it: the stand-in replays its file from the
  // start to a new process, so the file starts afresh.
  agent->Kill(SIGKILL);
  ClearEvents();
  agent = StartAgent(kubelet.socket_path());
  const int calls = kubelet.ListCalls();
  ASSERT_TRUE(testing::WaitUntil([&] { return kubelet.ListCalls() >= calls + 3; })) << agent->Log();
  EXPECT_EQ(PublishedHealth(1), faulted);
  EXPECT_EQ(Resets(), "");

  // Again without the state file: what the Node publishes keeps it out.
  agent->Kill(SIGKILL);
  ClearEvents();
  ASSERT_EQ(::unlink((dir_.path() + "/gpu-health.json").c_str()), 0);
  agent = StartAgent(kubelet.socket_path());
  const int calls_again = kubelet.ListCalls();
  ASSERT_TRUE(testing::WaitUntil([&] { return kubelet.ListCalls() >= calls_again + 3; }))
      << agent->Log();
  EXPECT_EQ(PublishedHealth(1), faulted);

  kubelet.SetPods({});
  ASSERT_TRUE(testing::WaitUntil([&] { return PublishedHealth(1).in_service(); })) << agent->Log();
  EXPECT_EQ(Resets(), ResetOf(1));
}

TEST_F(LeaseSyncHealthTest, AGpuWhoseResetKeepsFailingStaysOutWithTheReason) {
  PodResourcesKubelet kubelet(dir_.path() + "/kubelet.sock");
  ASSERT_TRUE(kubelet.ok());
  faults_.SetFaults(gpus_[2].first + " reset_fail=3\n");
  auto agent = StartAgent(kubelet.socket_path());
  ASSERT_TRUE(testing::WaitUntil([&] {
    return agent->Log().find("watching") != std::string::npos;
  })) << agent->Log();
  Xid(2, 48);
  ASSERT_TRUE(testing::WaitUntil([&] {
    return PublishedHealth(2).step == health::RecoveryStep::kOut;
  })) << agent->Log();
  const health::GpuHealth out = PublishedHealth(2);
  EXPECT_NE(out.reason.find("gave up after 3 attempts"), std::string::npos) << out.reason;
  const std::string failed = "reset " + gpus_[2].second + " " + gpus_[2].first + " -> 3\n";
  EXPECT_EQ(Resets(), failed + failed + failed);
  EXPECT_TRUE(PublishedHealth(0).in_service());
}

}  // namespace
}  // namespace tessera::k8s

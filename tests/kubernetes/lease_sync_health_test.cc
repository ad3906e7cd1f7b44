// GPU faults on a Kubernetes node: tessera-lease-sync (a real process) watches the stand-in
// NVML's GPUs, publishes a faulted GPU in its Node's GPU listing at once, waits until kubelet's
// allocations (PodResources, emulated on a real socket) show no Pod on it, resets it through the
// configured command (a stand-in that records its calls), and publishes it healthy again. The
// recovery step survives kill -9 of the agent.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "backends/kubernetes/node_gpus.h"
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

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

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
    events_ = dir_.path() + "/events";
    ::setenv("TESSERA_FAKE_NVML_EVENTS", events_.c_str(), 1);
    // The stand-in reset: records each call (nvidia-smi's arguments) and succeeds.
    reset_script_ = dir_.path() + "/nvidia-smi";
    std::ofstream(reset_script_) << "#!/bin/sh\necho \"$*\" >> " << dir_.path() << "/resets\n";
    ::chmod(reset_script_.c_str(), 0755);
  }
  void TearDown() override { ::unsetenv("TESSERA_FAKE_NVML_EVENTS"); }

  std::unique_ptr<LeaseSyncProcess> StartAgent(const std::string& socket) {
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
                                 "0",
                                 "--nvml",
                                 FAKE_NVML,
                                 "--gpu-health-state",
                                 dir_.path() + "/gpu-health.json",
                                 "--gpu-reset-command",
                                 reset_script_ + " -r -i {uuid}",
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
  void Xid(size_t gpu, int xid) {
    std::ofstream(events_, std::ios::app) << gpus_[gpu].first << " " << xid << "\n";
  }
  std::string Resets() const { return ReadText(dir_.path() + "/resets"); }
  podresources::PodDevices PodOn(size_t gpu) const {
    return {"tenant-team-a", "train-1", {{"main", "nvidia.com/gpu", {gpus_[gpu].second}}}};
  }

  FakeApiServer server_;
  TempDir dir_;
  std::unique_ptr<Client> client_;
  std::string root_;
  std::vector<std::pair<std::string, std::string>> gpus_;  // PCI address, UUID
  std::string events_;
  std::string reset_script_;
};

TEST_F(LeaseSyncHealthTest, AFaultIsPublishedAtOnceAndTheGpuIsResetOnceNoPodHoldsIt) {
  testing::FakeNvmlState nvml("hgx-h100-dgx");
  PodResourcesKubelet kubelet(dir_.path() + "/kubelet.sock");
  ASSERT_TRUE(kubelet.ok());
  kubelet.SetPods({PodOn(0)});
  auto agent = StartAgent(kubelet.socket_path());
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

  // kubelet still has a Pod on it: several rounds later, no reset.
  const int calls = kubelet.ListCalls();
  ASSERT_TRUE(testing::WaitUntil([&] { return kubelet.ListCalls() >= calls + 3; }));
  EXPECT_EQ(Resets(), "");
  EXPECT_EQ(PublishedHealth(0).step, health::RecoveryStep::kDraining);

  // The Pod is gone: reset (of that GPU only), verified, published healthy with its history.
  kubelet.SetPods({});
  ASSERT_TRUE(testing::WaitUntil([&] { return PublishedHealth(0).in_service(); })) << agent->Log();
  EXPECT_EQ(Resets(), "-r -i " + gpus_[0].second + "\n");
  health::GpuHealth back = PublishedHealth(0);
  EXPECT_EQ(back.history, faulted.history);
  EXPECT_EQ(back.faulted_ms, 0);

  // Merge patches of the annotation only: the Node's other metadata stays, and its
  // resourceVersion moved on with each write.
  auto node = client_->Get(Resource::Nodes(), "", "node-1");
  ASSERT_TRUE(node.ok());
  EXPECT_EQ((*node)["metadata"]["labels"]["a"], "b");
  EXPECT_GT(std::stoll((*node)["metadata"]["resourceVersion"].get<std::string>()),
            std::stoll(version_before));
}

TEST_F(LeaseSyncHealthTest, ARestartedAgentResumesRecoveryFromItsStateOrItsNode) {
  testing::FakeNvmlState nvml("hgx-h100-dgx");
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

  // kill -9 while the Pod still holds it; the restarted agent keeps it out (its state file).
  agent->Kill(SIGKILL);
  agent = StartAgent(kubelet.socket_path());
  const int calls = kubelet.ListCalls();
  ASSERT_TRUE(testing::WaitUntil([&] { return kubelet.ListCalls() >= calls + 3; })) << agent->Log();
  EXPECT_EQ(PublishedHealth(1), faulted);
  EXPECT_EQ(Resets(), "");

  // Again without the state file: what the Node publishes keeps it out.
  agent->Kill(SIGKILL);
  ASSERT_EQ(::unlink((dir_.path() + "/gpu-health.json").c_str()), 0);
  agent = StartAgent(kubelet.socket_path());
  const int calls_again = kubelet.ListCalls();
  ASSERT_TRUE(testing::WaitUntil([&] { return kubelet.ListCalls() >= calls_again + 3; }))
      << agent->Log();
  EXPECT_EQ(PublishedHealth(1), faulted);

  kubelet.SetPods({});
  ASSERT_TRUE(testing::WaitUntil([&] { return PublishedHealth(1).in_service(); })) << agent->Log();
  EXPECT_EQ(Resets(), "-r -i " + gpus_[1].second + "\n");
}

}  // namespace
}  // namespace tessera::k8s

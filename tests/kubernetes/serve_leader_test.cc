// Real tessera-serve --backend kubernetes --leader-elect replicas against the scripted API
// server, sharing their state in the cluster: only the replica holding the coordination.k8s.io/v1
// Lease places, whichever replica took the submission; after kill -9 of the leader another
// replica takes the Lease and places; a leader paused (SIGSTOP) past its Lease and woken
// (SIGCONT) places nothing while the other replica leads.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "backends/kubernetes/kubernetes_backend.h"
#include "kubernetes/fake_apiserver.h"
#include "kubernetes/gpu_node.h"
#include "serve/serve_process.h"
#include "support/wait.h"

namespace tessera::testing {
namespace {

using k8s::Json;
using k8s::Resource;

constexpr const char* kNamespace = "tessera-system";

class ServeKubernetesReplicas : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteKubeconfigFile(dir_.path() + "/kubeconfig", api_.url());
    config_.server = api_.url();
    admin_ = std::make_unique<k8s::Client>(config_);
    PublishGpuNode(*admin_, "gpu-node-1", "hgx-h100-dgx");
  }

  // A replica with short election timings (3 s Lease, 2 s renew deadline).
  std::unique_ptr<ServeProcess> StartReplica(const std::string& identity) {
    const std::string dir = dir_.path() + "/" + identity;
    std::filesystem::create_directories(dir);
    auto replica = std::make_unique<ServeProcess>(
        dir,
        std::vector<std::string>{
            "--root", MaterializeHost("hgx-h100-dgx"), "--backend", "kubernetes", "--kubeconfig",
            dir_.path() + "/kubeconfig", "--cdi-dir", dir + "/cdi", "--instance",
            "tessera-control-plane", "--leader-elect", "--leader-elect-identity", identity,
            "--leader-elect-namespace", kNamespace, "--leader-elect-lease-duration-ms", "3000",
            "--leader-elect-renew-deadline-ms", "2000", "--leader-elect-retry-period-ms", "300",
            // One admin token for every replica, as the chart mounts.
            "--admin-token-file", dir_.path() + "/admin.token"});
    std::string log;
    EXPECT_TRUE(replica->Start(&log)) << log;
    return replica;
  }

  std::string AdminToken() { return Trimmed(ReadText(dir_.path() + "/admin.token")); }

  std::string Holder() {
    auto lease = admin_->Get(Resource::Leases(), kNamespace, "tessera-control-plane");
    return lease ? (*lease)["spec"].value("holderIdentity", "") : "";
  }

  // A one-GPU container submitted through the replica's API; its ID.
  std::string Submit(const ServeProcess& replica) {
    auto connection = replica.Connect(AdminToken());
    WaitUntil([&] {
      Json gpus = CallJson(*connection, "GET", "/v1/gpus").value("gpus", Json::array());
      return gpus.is_array() && gpus.size() == 8;
    });
    int status = 0;
    CallJson(*connection, "PUT", "/v1/tenancies/team-a", "{}", &status);
    EXPECT_EQ(status, 200);
    Json submitted = CallJson(*connection, "POST", "/v1/containers",
                              R"({"image":"cuda","tenancy":"team-a","gpus":1})", &status);
    EXPECT_EQ(status / 100, 2) << submitted.dump();
    return submitted.value("id", "");
  }

  bool HasPod(const std::string& id) {
    return admin_->Get(Resource::Pods(), "tenant-team-a", backends::PodNameFor(id)).ok();
  }

  size_t GpuLeaseCount() {
    auto list = admin_->List(Resource::GpuLeases(), "");
    return list ? (*list).value("items", Json::array()).size() : 0;
  }

  FakeApiServer api_;
  TempDir dir_;
  k8s::ClientConfig config_;
  std::unique_ptr<k8s::Client> admin_;
};

// GPU reservations a replica's log records (SetGpuState: "GPU <id>: free -> reserved").
size_t Reservations(const std::string& log) {
  size_t count = 0;
  for (size_t at = log.find("-> reserved"); at != std::string::npos;
       at = log.find("-> reserved", at + 1))
    ++count;
  return count;
}

TEST_F(ServeKubernetesReplicas, AStandbyPlacesNothingAndTakesOverAfterTheLeaderIsKilled) {
  auto a = StartReplica("replica-a");
  ASSERT_TRUE(WaitUntil([&] { return Holder() == "replica-a"; }));
  auto b = StartReplica("replica-b");
  // Taken by the standby, placed by the leader (it hears of it through its watch).
  const std::string id = Submit(*b);
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(WaitUntil([&] { return HasPod(id); })) << a->log();
  EXPECT_EQ(Holder(), "replica-a");
  EXPECT_EQ(Reservations(b->log()), 0u);
  EXPECT_EQ(Reservations(a->log()), 1u);
  EXPECT_EQ(GpuLeaseCount(), 1u);
  a->Kill(SIGKILL);
  ASSERT_TRUE(WaitUntil([&] { return Holder() == "replica-b"; }));
  const std::string next = Submit(*b);
  ASSERT_TRUE(WaitUntil([&] { return HasPod(next); }))
      << ReadText(dir_.path() + "/replica-b/serve.log");
  // The new leader placed only the new one: the first keeps its one lease.
  EXPECT_EQ(Reservations(b->log()), 1u);
  EXPECT_EQ(GpuLeaseCount(), 2u);
  auto lease = admin_->Get(Resource::Leases(), kNamespace, "tessera-control-plane");
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ((*lease)["spec"]["leaseTransitions"], 1);
}

TEST_F(ServeKubernetesReplicas, ALeaderWokenAfterItsLeasePlacesNothing) {
  auto a = StartReplica("replica-a");
  ASSERT_TRUE(WaitUntil([&] { return Holder() == "replica-a"; }));
  auto b = StartReplica("replica-b");
  ASSERT_EQ(::kill(a->pid(), SIGSTOP), 0);
  ASSERT_TRUE(WaitUntil([&] { return Holder() == "replica-b"; }));
  ASSERT_EQ(::kill(a->pid(), SIGCONT), 0);
  // The woken replica still answers its API and accepts the submission; the leader places it.
  const std::string id = Submit(*a);
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(WaitUntil([&] { return HasPod(id); })) << b->log();
  EXPECT_EQ(Holder(), "replica-b");
  EXPECT_EQ(Reservations(a->log()), 0u);
  EXPECT_EQ(Reservations(b->log()), 1u);
  EXPECT_EQ(GpuLeaseCount(), 1u);
  // The woken replica hears of the placement through its watch.
  auto connection = a->Connect(AdminToken());
  EXPECT_TRUE(WaitUntil([&] {
    return CallJson(*connection, "GET", "/v1/containers/" + id).value("state", "") == "running";
  }));
}

}  // namespace
}  // namespace tessera::testing

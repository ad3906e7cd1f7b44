// Failover of tessera-serve --backend kubernetes --leader-elect against the scripted API server
// on loopback: two replicas sharing their state in the cluster, kill -9 of the leader, a one-GPU
// submission to the standby right after, then the time from the kill until the standby holds the
// Lease and until its first placement (the Pod exists).
//
//   failover_bench [ROUNDS] [LEASE_MS RENEW_MS RETRY_MS]   (default 3 rounds, 15000 10000 2000)
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "backends/kubernetes/kubernetes_backend.h"
#include "backends/kubernetes/node_gpus.h"
#include "inventory/inventory.h"
#include "kubernetes/fake_apiserver.h"
#include "serve/serve_process.h"
#include "support/wait.h"

using namespace tessera;
using namespace tessera::testing;
using k8s::Json;
using k8s::Resource;
using Clock = std::chrono::steady_clock;

namespace {

double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

struct Round {
  double lease_taken_s = -1, first_placement_s = -1;
};

Round RunRound(const std::string& lease_ms, const std::string& renew_ms,
               const std::string& retry_ms) {
  FakeApiServer api;
  TempDir dir;
  WriteKubeconfigFile(dir.path() + "/kubeconfig", api.url());
  k8s::ClientConfig config;
  config.server = api.url();
  k8s::Client admin(config);
  inventory::ReadOptions read;
  read.root = MaterializeHost("hgx-h100-dgx");
  auto inv = inventory::ReadInventory(read);
  k8s::NodeGpus gpus;
  for (const auto* gpu : inv->Gpus())
    gpus.gpus.push_back({gpu->pci_address, gpu->gpu_uuid.value_or(""), gpu->model, gpu->numa_node,
                         gpu->upstream_bridges});
  (void)admin.Create(
      Resource::Nodes(), "",
      {{"apiVersion", "v1"},
       {"kind", "Node"},
       {"metadata",
        {{"name", "gpu-node-1"},
         {"annotations", {{k8s::kNodeGpusAnnotation, k8s::NodeGpusAnnotation(gpus)}}}}}});
  auto start = [&](const std::string& identity) {
    const std::string home = dir.path() + "/" + identity;
    std::filesystem::create_directories(home);
    auto replica = std::make_unique<ServeProcess>(
        home, std::vector<std::string>{"--root",
                                       read.root,
                                       "--backend",
                                       "kubernetes",
                                       "--kubeconfig",
                                       dir.path() + "/kubeconfig",
                                       "--cdi-dir",
                                       home + "/cdi",
                                       "--instance",
                                       "tessera-control-plane",
                                       "--admin-token-file",
                                       dir.path() + "/admin.token",
                                       "--leader-elect",
                                       "--leader-elect-identity",
                                       identity,
                                       "--leader-elect-namespace",
                                       "tessera-system",
                                       "--leader-elect-lease-duration-ms",
                                       lease_ms,
                                       "--leader-elect-renew-deadline-ms",
                                       renew_ms,
                                       "--leader-elect-retry-period-ms",
                                       retry_ms});
    replica->Start();
    return replica;
  };
  auto holder = [&] {
    auto lease = admin.Get(Resource::Leases(), "tessera-system", "tessera-control-plane");
    return lease ? (*lease)["spec"].value("holderIdentity", "") : std::string();
  };
  auto a = start("replica-a");
  WaitUntil([&] { return holder() == "replica-a"; });
  auto b = start("replica-b");
  auto connection = b->Connect(Trimmed(ReadText(dir.path() + "/admin.token")));
  WaitUntil([&] {
    Json listed = CallJson(*connection, "GET", "/v1/gpus").value("gpus", Json::array());
    return listed.is_array() && listed.size() == 8;
  });
  CallJson(*connection, "PUT", "/v1/tenancies/team-a", "{}");
  Round round;
  const auto killed = Clock::now();
  a->Kill(SIGKILL);
  // Taken by the standby while nobody leads: placed once it does.
  Json submitted = CallJson(*connection, "POST", "/v1/containers",
                            R"({"image":"cuda","tenancy":"team-a","gpus":1})");
  const std::string pod = backends::PodNameFor(submitted.value("id", ""));
  if (WaitUntil([&] { return holder() == "replica-b"; }, std::chrono::seconds(120)))
    round.lease_taken_s = Seconds(Clock::now() - killed);
  if (WaitUntil([&] { return admin.Get(Resource::Pods(), "tenant-team-a", pod).ok(); },
                std::chrono::seconds(120)))
    round.first_placement_s = Seconds(Clock::now() - killed);
  return round;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = argc > 1 ? std::atoi(argv[1]) : 3;
  std::string lease_ms = argc > 4 ? argv[2] : "15000";
  std::string renew_ms = argc > 4 ? argv[3] : "10000";
  std::string retry_ms = argc > 4 ? argv[4] : "2000";
  std::printf(
      "failover (scripted API server on loopback, not a real cluster): lease %s ms, "
      "renew deadline %s ms, retry %s ms\n",
      lease_ms.c_str(), renew_ms.c_str(), retry_ms.c_str());
  for (int i = 0; i < rounds; ++i) {
    Round round = RunRound(lease_ms, renew_ms, retry_ms);
    std::printf(
        "round %d: kill -9 -> Lease taken %.2f s, -> first placement %.2f s "
        "(goal <= %.1f s = 2x lease)\n",
        i + 1, round.lease_taken_s, round.first_placement_s,
        2 * std::atof(lease_ms.c_str()) / 1000);
  }
  return 0;
}

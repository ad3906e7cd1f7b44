// Several replicas of the control plane (--backend kubernetes): the cluster store's watches,
// leader election, and the nodes' GPUs.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "backends/kubernetes/state_objects.h"
#include "topology/topology.h"
#include "wiring.h"

namespace tessera::serve_program {
namespace {

std::string EnvOr(const char* name, std::string fallback) {
  const char* value = std::getenv(name);
  return value && *value ? std::string(value) : std::move(fallback);
}

// A node's published GPUs as the service takes them: records, topology, partition table.
Result<serve::Service::NodeInventory> NodeInventoryOf(const k8s::NodeGpus& node,
                                                      const std::string& cdi_kind) {
  serve::Service::NodeInventory out;
  out.name = node.node;
  for (size_t i = 0; i < node.gpus.size(); ++i) {
    const auto& gpu = node.gpus[i];
    fleet::GpuRecord record;
    record.pci_address = gpu.pci_address;
    record.index = static_cast<int>(i);
    record.model = gpu.model;
    record.cdi_device = cdi_kind + "=" + (gpu.uuid.empty() ? gpu.pci_address : gpu.uuid);
    record.health = gpu.health;  // the node agent's: Gpus::UpdateNodes contains a fault
    out.gpus.push_back(std::move(record));
    topology::GpuInfo info;
    info.id = gpu.pci_address;
    info.pci_address = gpu.pci_address;
    info.numa_node = gpu.numa_node;
    info.upstream_bridges = gpu.upstream_bridges;
    out.topology.gpus.push_back(std::move(info));
  }
  if (!node.partition_table.is_null()) {
    auto table =
        topology::ParsePartitionTable(node.partition_table.dump(), topology::TableFormat::kJson);
    if (!table) return table.error().WithContext("node " + node.node + ": partitionTable");
    out.partition_table = std::move(*table);
  }
  return out;
}

}  // namespace

std::string StateNamespace(const ServeFlags& flags) {
  return flags.leader_elect_namespace.empty() ? EnvOr("POD_NAMESPACE", "tessera-system")
                                              : flags.leader_elect_namespace;
}

void FollowCluster(k8s::ClusterStore& cluster, serve::Service& service) {
  // The API opens once every watch has listed (so /readyz answers only on a synced cache).
  serve::Service* served = &service;
  cluster.Follow([served](const fleet::Mutation& change) { served->ApplyReplicated(change); });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!cluster.Synced() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (!cluster.Synced()) Die(Unavailable("cluster store: watches did not sync within 60 s"));
}

std::unique_ptr<k8s::LeaderElector> ElectLeader(const ServeFlags& flags,
                                                const k8s::ClientConfig& config,
                                                serve::Service& service,
                                                std::atomic<k8s::LeaderElector*>& elected) {
  k8s::LeaderElectionOptions election;
  election.ns = flags.leader_elect_namespace.empty() ? EnvOr("POD_NAMESPACE", "tessera-system")
                                                     : flags.leader_elect_namespace;
  char hostname[256] = {};
  ::gethostname(hostname, sizeof hostname - 1);
  election.identity =
      flags.leader_elect_identity.empty()
          ? EnvOr("POD_NAME", std::string(hostname) + "-" + std::to_string(::getpid()))
          : flags.leader_elect_identity;
  election.lease_duration = std::chrono::milliseconds(flags.lease_duration_ms);
  election.renew_deadline = std::chrono::milliseconds(flags.renew_deadline_ms);
  election.retry_period = std::chrono::milliseconds(flags.retry_period_ms);
  if (auto status = k8s::CheckLeaderElectionOptions(election); !status) Die(status.error());
  serve::Service* target = &service;
  auto elector = std::make_unique<k8s::LeaderElector>(
      config, election, [target] { target->StartLeading(); }, [target] { target->StopLeading(); });
  elected = elector.get();
  spdlog::info("leader election: {} in namespace {}, Lease tessera-control-plane",
               election.identity, election.ns);
  return elector;
}

std::unique_ptr<backends::NodeGpuWatch> WatchNodeGpus(const k8s::ClientConfig& config,
                                                      const std::string& cdi_kind,
                                                      serve::Service& service) {
  serve::Service* target = &service;
  return backends::StartNodeGpuWatch(
      config, [target, kind = cdi_kind](const std::vector<k8s::NodeGpus>& nodes) {
        std::vector<serve::Service::NodeInventory> inventories;
        for (const auto& node : nodes) {
          auto inventory = NodeInventoryOf(node, kind);
          if (!inventory) {
            spdlog::warn("{}; its GPUs are not placed", inventory.error().message);
            continue;
          }
          inventories.push_back(std::move(*inventory));
        }
        target->UpdateNodes(std::move(inventories));
      });
}

}  // namespace tessera::serve_program

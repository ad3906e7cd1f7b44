#include "nodeagent/lease_sync_fabric.h"

#include <algorithm>
#include <cstdio>

#include "backends/kubernetes/node_gpus.h"
#include "nodeagent/agent_loops.h"

namespace tessera::k8s {

std::map<std::string, std::vector<std::string>> LeasedPodDevices(
    const std::map<std::string, Json>& leases, const podresources::PodList& pods,
    const NodeGpus& gpus) {
  std::map<std::string, std::vector<std::string>> out;
  for (const auto& [name, lease] : leases) {
    const Json& spec = lease.value("spec", Json::object());
    const Json& pod_ref = spec.value("podRef", Json::object());
    if (!pod_ref.is_object()) continue;
    const auto* pod = pods.Find(pod_ref.value("namespace", ""), pod_ref.value("name", ""));
    if (!pod) continue;
    auto ids = podresources::DeviceIds(*pod, spec.value("resource", "nvidia.com/gpu"));
    if (ids.empty()) continue;
    auto addresses = PciAddressesOfDeviceIds(ids, gpus);
    std::sort(addresses.begin(), addresses.end());
    addresses.erase(std::unique(addresses.begin(), addresses.end()), addresses.end());
    out[name] = std::move(addresses);
  }
  return out;
}

std::vector<std::string> SyncPartitions(
    fabricmanager::PartitionActivator& fabric,
    const std::map<std::string, std::vector<std::string>>& held) {
  std::vector<std::string> problems;
  if (auto reconciled =
          fabric.Reconcile([&](const std::string& holder) { return held.count(holder) > 0; });
      !reconciled) {
    problems.push_back(reconciled.error().message);
  }
  for (const auto& [lease, gpus] : held) {
    if (auto activated = fabric.Activate(lease, gpus); !activated)
      problems.push_back("lease " + lease + ": " + activated.error().message);
  }
  return problems;
}

}  // namespace tessera::k8s

namespace tessera::nodeagent {

void SyncPartitionsLoop(fabricmanager::PartitionActivator& fabric, const LeaseSyncOptions& options,
                        const std::optional<topology::PartitionTable>& table, NodeLeases& leases,
                        const std::atomic<bool>& stop) {
  k8s::NodeGpus gpus;
  if (auto read = ReadNodeGpus(options.root, table)) gpus = std::move(*read);
  std::string last_problem;
  while (!stop) {
    bool synced = false;
    auto snapshot = leases.Snapshot(&synced);
    std::string problem;
    if (synced) {
      auto pods = podresources::List(options.pod_resources_socket, std::chrono::seconds(5));
      if (!pods) {
        problem = pods.error().message;
      } else {
        auto held = k8s::LeasedPodDevices(snapshot, *pods, gpus);
        for (const auto& line : k8s::SyncPartitions(fabric, held))
          problem += (problem.empty() ? "" : "; ") + line;
      }
    }
    if (!problem.empty() && problem != last_problem)
      std::fprintf(stderr, "tessera-lease-sync: partitions: %s\n", problem.c_str());
    last_problem = problem;
    SleepUnlessStopped(stop, std::chrono::milliseconds(options.fabric_interval_ms),
                       std::chrono::milliseconds(20));
  }
}

}  // namespace tessera::nodeagent

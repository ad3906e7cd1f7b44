#include "backends/kubernetes/lease_sync_fabric.h"

#include <algorithm>

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

// kubelet's allocations (PodResources) -> each leased Pod's GpuLease status.allocatedDevices: with
// the device plugin, kubelet picks the IDs, and the firmware check must follow them.
#include <algorithm>
#include <cstdio>

#include "backends/kubernetes/node_gpus.h"
#include "common/untrusted_text.h"
#include "nodeagent/agent_loops.h"
#include "podresources/podresources.h"

namespace tessera::nodeagent {
namespace {

// The leases of this node whose Pod may hold devices now.
bool HoldsDevices(const k8s::Json& lease) {
  std::string state = k8s::StringField(k8s::ObjectField(lease, "status"), "state", "reserved");
  return state == "reserved" || state == "active";
}

std::vector<std::string> AllocatedDevicesOf(const k8s::Json& lease) {
  std::vector<std::string> out;
  for (const auto& id : k8s::ArrayField(k8s::ObjectField(lease, "status"), "allocatedDevices")) {
    if (id.is_string()) out.push_back(id.get<std::string>());
  }
  return out;
}

// The node's GPUs and how to read them again, for IDs that appeared since the last inventory.
struct KnownGpus {
  k8s::NodeGpus gpus;
  const std::string& root;
  const std::optional<topology::PartitionTable>& table;

  // `ids` as PCI addresses; re-reads the inventory once when one of them is not a GPU it knows.
  std::vector<std::string> AddressesOf(const std::vector<std::string>& ids) {
    auto allocated = k8s::PciAddressesOfDeviceIds(ids, gpus);
    auto known = [&](const std::string& pci) {
      for (const auto& gpu : gpus.gpus)
        if (gpu.pci_address == pci) return true;
      return false;
    };
    if (!std::all_of(allocated.begin(), allocated.end(), known)) {
      if (auto fresh = ReadNodeGpus(root, table)) {
        gpus = std::move(*fresh);
        allocated = k8s::PciAddressesOfDeviceIds(ids, gpus);
      }
    }
    return allocated;
  }
};

// Patches one lease's status when its Pod's devices differ from it. Returns the problem, or
// empty.
std::string ReportLease(k8s::Client& client, const std::string& name, const k8s::Json& lease,
                        const podresources::PodList& list, KnownGpus& known) {
  const k8s::Json& spec = k8s::ObjectField(lease, "spec");
  const k8s::Json& pod_ref = k8s::ObjectField(spec, "podRef");
  const auto* pod =
      list.Find(k8s::StringField(pod_ref, "namespace"), k8s::StringField(pod_ref, "name"));
  if (!pod) return {};  // not started yet, or already gone
  auto ids = podresources::DeviceIds(*pod, k8s::StringField(spec, "resource", "nvidia.com/gpu"));
  if (ids.empty()) return {};
  auto allocated = known.AddressesOf(ids);
  if (allocated == AllocatedDevicesOf(lease)) return {};
  auto patched = client.Patch(k8s::Resource::GpuLeases(), "", name,
                              {{"status", {{"allocatedDevices", allocated}}}},
                              k8s::PatchType::kMerge, "status");
  if (!patched) return "lease " + Excerpt(name, 253) + ": " + patched.error().message;
  std::string joined;
  for (const auto& id : allocated)
    joined += (joined.empty() ? "" : ",") + id;
  std::fprintf(stderr, "tessera-lease-sync: lease %s: kubelet allocated %s\n",
               Excerpt(name, 253).c_str(), Excerpt(joined, 600).c_str());
  return {};
}

// One round: List once, then patch every lease whose Pod's devices differ from what its status
// says. Returns the problem of this round, or empty.
std::string ReportAllocations(k8s::Client& client, const std::map<std::string, k8s::Json>& leases,
                              const std::string& socket, KnownGpus& known) {
  bool wanted = false;
  for (const auto& [name, lease] : leases)
    wanted = wanted || HoldsDevices(lease);
  if (!wanted) return {};
  auto list = podresources::List(socket, std::chrono::seconds(5));
  if (!list) return list.error().message;
  for (const auto& warning : list->warnings)
    std::fprintf(stderr, "tessera-lease-sync: PodResources: %s\n", warning.c_str());
  for (const auto& [name, lease] : leases) {
    if (!HoldsDevices(lease)) continue;
    std::string problem = ReportLease(client, name, lease, *list, known);
    if (!problem.empty()) return problem;
  }
  return {};
}

}  // namespace

void ReportAllocationsLoop(const k8s::ClientConfig& config, const LeaseSyncOptions& options,
                           const std::optional<topology::PartitionTable>& table, NodeLeases& leases,
                           const std::atomic<bool>& stop) {
  if (options.pod_resources_interval_ms <= 0) return;
  k8s::Client client(config);
  KnownGpus known{{}, options.root, table};
  if (auto read = ReadNodeGpus(options.root, table)) known.gpus = std::move(*read);
  std::string last_problem;
  while (!stop) {
    std::string problem =
        ReportAllocations(client, leases.Snapshot(), options.pod_resources_socket, known);
    // A kubelet that is down says so every round: log each new problem once.
    if (!problem.empty() && problem != last_problem)
      std::fprintf(stderr, "tessera-lease-sync: %s\n", problem.c_str());
    last_problem = problem;
    SleepUnlessStopped(stop, std::chrono::milliseconds(options.pod_resources_interval_ms),
                       std::chrono::milliseconds(50));
  }
}

}  // namespace tessera::nodeagent

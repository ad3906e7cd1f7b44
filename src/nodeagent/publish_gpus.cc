// This node's GPUs on its Node object (the tessera.dev/gpus annotation), and the small pieces
// every loop of the agent shares.
#include <cstdio>
#include <thread>

#include "backends/kubernetes/node_gpus.h"
#include "inventory/inventory.h"
#include "nodeagent/agent_loops.h"
#include "nodeagent/gpu_recovery.h"

namespace tessera::nodeagent {

std::map<std::string, k8s::Json> NodeLeases::Snapshot(bool* was_synced) {
  std::lock_guard lock(mu);
  if (was_synced) *was_synced = synced;
  return leases;
}

void SleepUnlessStopped(const std::atomic<bool>& stop, std::chrono::milliseconds wait,
                        std::chrono::milliseconds step) {
  auto until = std::chrono::steady_clock::now() + wait;
  while (!stop && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(step);
}

Result<k8s::NodeGpus> ReadNodeGpus(const std::string& root,
                                   const std::optional<topology::PartitionTable>& table) {
  inventory::ReadOptions read;
  read.root = root;
  read.read_driver_files = false;
  auto inv = inventory::ReadInventory(read);
  if (!inv) return inv.error().WithContext("inventory of " + root);
  k8s::NodeGpus out;
  for (const auto* gpu : inv->Gpus()) {
    k8s::NodeGpu item;
    item.pci_address = gpu->pci_address;
    item.uuid = gpu->gpu_uuid.value_or("");
    item.model = gpu->model;
    item.numa_node = gpu->numa_node;
    item.upstream_bridges = gpu->upstream_bridges;
    out.gpus.push_back(std::move(item));
  }
  if (table) out.partition_table = k8s::Json::parse(topology::PartitionTableToJson(*table, -1));
  return out;
}

namespace {

// Patches the annotation when the Node's differs from `annotation`; returns whether it patched.
Result<bool> PublishNodeGpus(k8s::Client& client, const std::string& node,
                             const std::string& annotation) {
  auto live = client.Get(k8s::Resource::Nodes(), "", node);
  if (!live) return live.error();
  const k8s::Json& annotations =
      k8s::ObjectField(k8s::ObjectField(*live, "metadata"), "annotations");
  if (annotations.contains(k8s::kNodeGpusAnnotation) &&
      k8s::StringField(annotations, k8s::kNodeGpusAnnotation) == annotation)
    return false;
  auto patched = client.Patch(k8s::Resource::Nodes(), "", node, k8s::NodeGpusPatch(annotation));
  if (!patched) return patched.error();
  return true;
}

// One round of the publisher: whether the Node now carries this node's GPUs and their health.
bool PublishRound(k8s::Client& client, const LeaseSyncOptions& options,
                  const std::optional<topology::PartitionTable>& table, NodeHealth& health) {
  auto gpus = ReadNodeGpus(options.root, table);
  if (!gpus) {
    std::fprintf(stderr, "tessera-lease-sync: %s\n", gpus.error().message.c_str());
    return false;
  }
  health.Fill(*gpus);
  auto patched = PublishNodeGpus(client, options.node, k8s::NodeGpusAnnotation(*gpus));
  if (!patched) {
    std::fprintf(stderr, "tessera-lease-sync: node %s: %s\n", options.node.c_str(),
                 patched.error().message.c_str());
    return false;
  }
  if (*patched)
    std::fprintf(stderr, "tessera-lease-sync: node %s: published %zu GPUs\n", options.node.c_str(),
                 gpus->gpus.size());
  return true;
}

}  // namespace

void PublishGpusLoop(const k8s::ClientConfig& config, const LeaseSyncOptions& options,
                     const std::optional<topology::PartitionTable>& table, NodeHealth& health,
                     const std::atomic<bool>& stop) {
  k8s::Client client(config);
  while (!stop) {
    uint64_t version = 0;
    health.Snapshot(&version);
    bool ok = PublishRound(client, options, table, health);
    if (ok && options.inventory_interval_ms <= 0 && !options.gpu_health) break;
    // A change of a GPU's health is published at once. Otherwise retry soon after a failure,
    // or wait for the next inventory round.
    auto wait = std::chrono::milliseconds(!ok ? 1000
                                          : options.inventory_interval_ms > 0
                                              ? options.inventory_interval_ms
                                              : 3600 * 1000);
    health.WaitForChange(version, wait, stop);
  }
}

}  // namespace tessera::nodeagent

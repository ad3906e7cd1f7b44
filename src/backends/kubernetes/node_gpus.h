// The GPUs of a node as the node agent publishes them on its Node object, and as the control
// plane reads them back to place across nodes.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "health/health.h"
#include "kubernetes/client.h"

namespace tessera::k8s {

// The node agent publishes its node's GPUs on the Node object under this annotation (compact
// JSON, see NodeGpusAnnotation); the control plane places across every node that has it.
inline constexpr const char* kNodeGpusAnnotation = "tessera.dev/gpus";

struct NodeGpu {
  std::string pci_address;  // "0000:18:00.0": with the node name, the GPU's identity
  std::string uuid;         // "GPU-…" when the NVIDIA driver reports one, else empty
  std::string model;
  int numa_node = -1;
  std::vector<std::string> upstream_bridges;  // nearest first: same-switch scoring
  // The node agent's view of its health: where it stands in recovery and its fault history.
  // The control plane stops the GPU's work and keeps it out of placement while it is not
  // healthy. Published only when it differs from a healthy GPU without history.
  health::GpuHealth health;
  friend bool operator==(const NodeGpu&, const NodeGpu&) = default;
};

struct NodeGpus {
  std::string node;           // the Node's name (not in the annotation itself)
  std::vector<NodeGpu> gpus;  // PCI order = topology index on the node
  // The node's NVLink fabric partition table (as topology::ParsePartitionTable reads it, with
  // this node's module ID -> PCI address map), when it runs in partition mode; null otherwise.
  Json partition_table;
  friend bool operator==(const NodeGpus&, const NodeGpus&) = default;
};

// {"version":1,"gpus":[{"pci":…,"uuid":…,"model":…,"numa":…,"bridges":[…],"health":…}],
//  "partitionTable":…} dumped compactly with sorted keys, so equal inventories give equal text.
std::string NodeGpusAnnotation(const NodeGpus& gpus);
// Parses the annotation; errors name the field ("gpus[2].pci: missing").
Result<NodeGpus> ParseNodeGpusAnnotation(std::string_view text);
// The GPUs a Node object publishes: nullopt without the annotation; an error names the node.
Result<std::optional<NodeGpus>> NodeGpusOf(const Json& node);
// Bounds of a GPU's published health (the annotation is anyone's who may edit Nodes).
inline constexpr size_t kMaxHealthReasonBytes = 512;
inline constexpr size_t kMaxHealthNameBytes = 64;  // signal, class and action names
inline constexpr int kMaxHealthAttempts = 1000;

// One GPU's health: {"step":"draining","reason":…,"attempts":…,"sinceMs":…,"faultedMs":…,
// "history":[{"atMs":…,"signal":"xid","xid":79,"class":"gpu","action":"stop-gpu","reason":…}]}.
// Longer reasons are cut to the bound, the oldest history entries beyond kMaxHistory left out.
Json GpuHealthJson(const health::GpuHealth& health);
// Parses it; an unknown step, more than kMaxHistory entries, a reason or name over its bound or
// a negative time are refused, the error naming the field ("history[3].reason: longer than …").
Result<health::GpuHealth> ParseGpuHealthJson(const Json& value);

// The merge patch that sets the annotation on a Node.
Json NodeGpusPatch(const std::string& annotation);
// kubelet device IDs as the device plugin advertises them (GPU UUID or PCI address, replicas
// "<id>::<n>") -> the node's PCI addresses, sorted and unique. An ID the node does not know is
// kept as it is, so that it still shows as a difference from the lease.
std::vector<std::string> PciAddressesOfDeviceIds(const std::vector<std::string>& ids,
                                                 const NodeGpus& gpus);

}  // namespace tessera::k8s

// The node agent's loops, each in a thread of its own with a client of its own; private to
// src/nodeagent (lease_sync.cc runs them).
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "backends/kubernetes/node_gpus.h"
#include "common/error.h"
#include "fabricmanager/fabricmanager.h"
#include "kubernetes/client.h"
#include "nodeagent/lease_sync_options.h"
#include "topology/topology.h"

namespace tessera::nodeagent {

// The GpuLeases of this node as the watch last saw them, by name.
struct NodeLeases {
  std::mutex mu;
  std::map<std::string, k8s::Json> leases;  // guarded by mu
  bool synced = false;                      // the watch has listed them once; guarded by mu

  std::map<std::string, k8s::Json> Snapshot(bool* was_synced = nullptr);
};

// Sleeps `wait` in steps of `step`, returning early once `stop` is set.
void SleepUnlessStopped(const std::atomic<bool>& stop, std::chrono::milliseconds wait,
                        std::chrono::milliseconds step);

// This node's GPUs: the inventory of `root` (no driver files) and `table`, when given.
Result<k8s::NodeGpus> ReadNodeGpus(const std::string& root,
                                   const std::optional<topology::PartitionTable>& table);

class NodeHealth;

// The Node annotation: every round compares with the live Node (one GET), so an annotation
// removed or edited by someone else is put back. Once only with --inventory-interval-ms 0 and
// --no-gpu-health; a change of a GPU's health in `health` is published at once.
void PublishGpusLoop(const k8s::ClientConfig& config, const LeaseSyncOptions& options,
                     const std::optional<topology::PartitionTable>& table, NodeHealth& health,
                     const std::atomic<bool>& stop);

// kubelet's allocations -> GpuLease status.allocatedDevices, every --pod-resources-interval-ms
// (never with 0).
void ReportAllocationsLoop(const k8s::ClientConfig& config, const LeaseSyncOptions& options,
                           const std::optional<topology::PartitionTable>& table, NodeLeases& leases,
                           const std::atomic<bool>& stop);

// The leased Pods' partitions, once the leases are known (before, every Pod would look
// unleased and its partition would be deactivated under it).
void SyncPartitionsLoop(fabricmanager::PartitionActivator& fabric, const LeaseSyncOptions& options,
                        const std::optional<topology::PartitionTable>& table, NodeLeases& leases,
                        const std::atomic<bool>& stop);

}  // namespace tessera::nodeagent

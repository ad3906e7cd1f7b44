// tessera-lease-sync: the node agent's link to the API server.
//  - Watches GpuLeases (list+watch, resumed and relisted by the client) and keeps the node lease
//    file (/run/tessera/leases.json) equal to the leases of this node, so the device plugin marks
//    GPUs under check or quarantined Unhealthy.
//  - Publishes this node's GPUs (inventory of --root) as the tessera.dev/gpus annotation of its
//    Node, re-reading the inventory every --inventory-interval-ms and patching only on change.
//  - Reads kubelet's PodResources List every --pod-resources-interval-ms and writes the devices
//    kubelet gave each leased Pod into its GpuLease's status.allocatedDevices (PCI addresses):
//    with the device plugin, kubelet picks the IDs, and the firmware check must follow them.
//  - With --fabric-manager (shared NVSwitch mode), owns this node's NVLink partitions: a leased
//    Pod's partition is activated when its devices appear in PodResources and deactivated when
//    they are gone (lease_sync_fabric.h); a restarted fabric manager is sent the active list.
//  - Measures what each leased Pod's GPU processes use (NVML, attributed by cgroup) every
//    --telemetry-interval-ms, keeps it in the GpuLease's status.measured and serves /metrics
//    and /v1/telemetry on --metrics-listen, behind --metrics-token-file (node_telemetry.h).
//  - Watches this node's GPUs for faults (NVML events and state, --fault-table), publishes each
//    GPU's health with its GPUs at once (the control plane stops the GPU's work), and resets,
//    verifies and returns a faulted GPU once kubelet shows no Pod on it (gpu_recovery.h); the
//    recovery step is kept in --gpu-health-state across restarts.
#pragma once

#include <atomic>
#include <memory>
#include <optional>

#include "fabricmanager/fabricmanager.h"
#include "kubernetes/client.h"
#include "nodeagent/lease_sync_options.h"
#include "topology/topology.h"

namespace tessera::nodeagent {

// What the agent opens before it runs: the API server's configuration, this node's partition
// table and, with --fabric-manager, the fabric manager (already watched).
struct LeaseSyncSetup {
  k8s::ClientConfig config;
  std::optional<topology::PartitionTable> table;
  std::unique_ptr<fabricmanager::PartitionActivator> fabric;
};

// Returns 0, or the exit code after printing why on stderr (2: a bad flag value; 4: the API
// server's configuration, the inventory or the fabric manager).
int PrepareLeaseSync(const LeaseSyncOptions& options, LeaseSyncSetup& setup);

// Runs the agent until `stop` is set or the GpuLease watch ends. Returns the exit code: 0, 2 for
// a bad telemetry endpoint flag, 4 when the watch failed.
int RunLeaseSync(const LeaseSyncOptions& options, LeaseSyncSetup& setup, std::atomic<bool>& stop);

}  // namespace tessera::nodeagent

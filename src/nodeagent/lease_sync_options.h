// tessera-lease-sync's options: one struct, its flags, and the checks that need them all.
#pragma once

#include <cstddef>
#include <string>

#include "common/error.h"
#include "telemetry/telemetry.h"

namespace CLI {
class App;
}

namespace tessera::nodeagent {

struct LeaseSyncOptions {
  std::string kubeconfig;  // empty: in-cluster service account
  std::string node;        // empty: $NODE_NAME
  std::string lease_file = "/run/tessera/leases.json";
  std::string root = "/";
  std::string partition_table;  // file or preset name
  int inventory_interval_ms = 60000;
  std::string pod_resources_socket;  // kubelet's (podresources::kDefaultSocket)
  int pod_resources_interval_ms = 10000;
  std::string fabric_manager;  // host[:port] or unix:PATH; empty: no partitions
  std::string nvfm_library = "libnvfm.so.1";
  std::string fabric_state = "/var/lib/tessera/fabric-partitions.json";
  int fabric_interval_ms = 1000;
  int telemetry_interval_ms = 10000;
  size_t telemetry_max_series = 10000;
  std::string metrics_listen;
  telemetry::EndpointOptions endpoint;
  int metrics_timeout_ms = static_cast<int>(telemetry::EndpointOptions{}.timeout.count());
  std::string nvml = "libnvidia-ml.so.1";
  std::string proc_dir = "/proc";
  // GPU faults (gpu_recovery.h): detection over --nvml, the classification table, the commands
  // that reset and test a GPU (split on spaces; "{uuid}", "{pci}", "{index}" replaced), and the
  // file that keeps each GPU's recovery step across restarts.
  bool gpu_health = true;
  std::string fault_table;  // empty: the built-in table
  std::string gpu_reset_command = "nvidia-smi -r -i {uuid}";
  std::string gpu_self_test_command;  // empty: verification by NVML state only
  std::string gpu_health_state = "/var/lib/tessera/gpu-health.json";
  int gpu_recovery_interval_ms = 1000;

  LeaseSyncOptions();
};

// Every flag of tessera-lease-sync, bound to `options`.
void AddLeaseSyncFlags(CLI::App& app, LeaseSyncOptions& options);

// After parsing: the node name from $NODE_NAME when --node was not given, and the flags that
// only make sense together. The error's message names the flags.
Status CheckLeaseSyncOptions(LeaseSyncOptions& options);

}  // namespace tessera::nodeagent

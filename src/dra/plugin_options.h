// tessera-dra-plugin's command line: the options of the DRA kubelet plugin, its flags and their
// checks.
#pragma once

#include <functional>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "cdi/cdi.h"
#include "common/error.h"
#include "dra/dra.h"
#include "health/health.h"

namespace CLI {
class App;
}

namespace tessera::dra {

struct PluginOptions {
  std::string node_name;  // empty: $NODE_NAME
  std::string root = "/";
  std::string kubeconfig;  // empty: in-cluster service account
  std::string driver_name = kDefaultDriverName;
  std::string registry_dir = "/var/lib/kubelet/plugins_registry";
  std::string plugin_dir = "/var/lib/kubelet/plugins/gpu.tessera.dev";
  std::string cdi_dir = "/var/run/cdi";
  std::string lease_file = "/run/tessera/leases.json";
  std::string mode = "auto";
  std::string nvml_library = "libnvidia-ml.so.1";
  int poll_ms = 200;
  std::string fabric_manager;  // empty: no fabric manager
  std::string nvfm_library = "libnvfm.so.1";
  std::string partition_table;
  // GPU faults: the Xid table override (empty: the built-in table), the reset and self-test
  // commands ("{uuid}", "{pci}", "{index}" replaced; words split on spaces; an empty self-test:
  // verification by NVML state only), and whether this plugin resets faulted GPUs itself.
  std::string fault_table;
  std::string gpu_reset_command = "nvidia-smi -r -i {uuid}";
  std::string self_test_command;
  bool recover = true;
  // With recover off: each GPU's health as the node agent publishes it on this node's Node object
  // (by PCI address; an error names what is wrong), so that the plugin follows its recovery. Set
  // by the program (the annotation's parser sits beside this module); empty: not followed.
  std::function<Result<std::map<std::string, health::GpuHealth>>(const nlohmann::json& node)>
      published_health;
  // MIG by demand (KEP-4815 partitionable devices): GPUs with MIG on are published as a counter
  // set, the whole GPU and every profile at every start; prepare makes the instance, unprepare
  // destroys it. Needs Kubernetes 1.35+ with DRAPartitionableDevices (beta, on, from 1.36), so off
  // by default. `mig_profiles`: table files besides the built-in H100 80GB table.
  bool mig_by_demand = false;
  std::vector<std::string> mig_profiles;
  std::string log_level = "info";
  // Set by CompletePluginOptions from `mode`.
  cdi::Mode cdi_mode = cdi::Mode::kAuto;
};

void AddPluginFlags(CLI::App& app, PluginOptions& options);

// Takes the node name from $NODE_NAME when no flag gave it (required) and parses the mode.
Status CompletePluginOptions(PluginOptions& options);

}  // namespace tessera::dra

#include "dra/plugin_options.h"

#include <CLI/CLI.hpp>
#include <cstdlib>

namespace tessera::dra {

void AddPluginFlags(CLI::App& app, PluginOptions& options) {
  app.add_option("--node-name", options.node_name, "This node's name (default: $NODE_NAME)");
  app.add_option("--root", options.root, "Host root")->capture_default_str();
  app.add_option("--kubeconfig", options.kubeconfig,
                 "kubeconfig (default: in-cluster service account)");
  app.add_option("--driver-name", options.driver_name, "DRA driver name")->capture_default_str();
  app.add_option("--registry-dir", options.registry_dir, "kubelet plugin registry dir")
      ->capture_default_str();
  app.add_option("--plugin-dir", options.plugin_dir, "Dir of dra.sock and the prepared claims")
      ->capture_default_str();
  app.add_option("--cdi-dir", options.cdi_dir, "Where per-claim CDI specs are written")
      ->capture_default_str();
  app.add_option("--lease-file", options.lease_file, "Node lease file")->capture_default_str();
  app.add_option("--mode", options.mode, "auto, driver or vfio")->capture_default_str();
  app.add_option("--nvml", options.nvml_library, "NVML library for MIG devices (\"\" = none)")
      ->capture_default_str();
  app.add_option("--poll-ms", options.poll_ms, "Socket, health and lease check interval")
      ->capture_default_str();
  app.add_option("--fabric-manager", options.fabric_manager,
                 "NVIDIA Fabric Manager API (host[:port] or unix:PATH): a claim must be exactly "
                 "one NVLink partition, activated at prepare and deactivated at unprepare");
  app.add_option("--nvfm-library", options.nvfm_library, "Fabric Manager client library")
      ->capture_default_str();
  app.add_option("--partition-table", options.partition_table,
                 "Partition table (preset or file): checked against the fabric manager's; its "
                 "pci_addresses place GPU modules where NVML cannot");
  app.add_option("--fault-table", options.fault_table,
                 "GPU fault classification file over the built-in Xid table (docs/faults.md)");
  app.add_option("--gpu-reset-command", options.gpu_reset_command,
                 "Resets a faulted GPU once no claim holds it ({uuid}, {pci}, {index} replaced; "
                 "\"\" = never reset)")
      ->capture_default_str();
  app.add_option("--gpu-self-test-command", options.self_test_command,
                 "Active test of a reset GPU before it is untainted (dcgmi diag output is read; "
                 "\"\" = NVML state only)");
  app.add_option("--recover", options.recover,
                 "Reset and verify faulted GPUs here (false: taint only, where the node agent "
                 "recovers them)")
      ->capture_default_str();
  app.add_option("--mig-by-demand", options.mig_by_demand,
                 "Publish MIG-enabled GPUs as partitionable devices (a counter set, the whole GPU, "
                 "every profile at every start) and make each claimed instance at prepare; needs "
                 "Kubernetes 1.35+ with DRAPartitionableDevices (docs/dra.md)")
      ->capture_default_str();
  app.add_option("--mig-profiles", options.mig_profiles,
                 "MIG profile table files (data/mig-profiles/*.yaml) besides the built-in H100 "
                 "80GB table");
  app.add_option("--log-level", options.log_level)->capture_default_str();
}

Status CompletePluginOptions(PluginOptions& options) {
  if (options.node_name.empty()) {
    if (const char* env = std::getenv("NODE_NAME")) options.node_name = env;
  }
  if (options.node_name.empty()) return InvalidArgument("--node-name (or $NODE_NAME) is required");
  auto cdi_mode = cdi::ParseMode(options.mode);
  if (!cdi_mode) return cdi_mode.error();
  options.cdi_mode = *cdi_mode;
  if (options.mig_by_demand && options.nvml_library.empty()) {
    return InvalidArgument("--mig-by-demand needs NVML (--nvml)");
  }
  return Ok();
}

}  // namespace tessera::dra

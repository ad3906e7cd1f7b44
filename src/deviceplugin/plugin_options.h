// tessera-device-plugin's command line: its flags, and the effective config they select with the
// config file and the environment.
#pragma once

#include <string>

#include "common/error.h"
#include "deviceplugin/deviceplugin.h"

namespace CLI {
class App;
}

namespace tessera::deviceplugin {

// The flags as given; an empty string (or 0) is a flag that was not given.
struct PluginFlags {
  std::string config_file;
  std::string root, socket_dir, cdi_dir, lease_file, strategy, policy, partition_table;
  std::string windows_snapshot;
  int windows_replicas = 0;  // 0: not given
  std::string windows_isolation;
  // GPU faults: the fault table file, the reset and self-test commands (argv split at spaces;
  // "none" for no reset), kubelet's PodResources socket and the GPU health file.
  std::string fault_table, gpu_reset_command, gpu_self_test_command, pod_resources_socket;
  std::string health_state_file;
  std::string log_level = "info";
};

void AddPluginFlags(CLI::App& app, PluginFlags& flags);

// File, then environment, then flags: each later source overrides the earlier. Reads the process
// environment on every call (the agent calls it again on SIGHUP).
Result<Config> LoadPluginConfig(const PluginFlags& flags);

}  // namespace tessera::deviceplugin

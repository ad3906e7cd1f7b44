#include "deviceplugin/plugin_options.h"

#include <CLI/CLI.hpp>
#include <map>
#include <string>
#include <vector>

#include "common/bounded_file.h"
#include "health/watch/watch.h"

extern char** environ;

namespace tessera::deviceplugin {
namespace {

std::map<std::string, std::string> ProcessEnvironment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string entry = *e;
    size_t eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return env;
}

// A command flag's argv ("none": no command at all).
std::vector<std::string> CommandArgv(const std::string& text) {
  std::vector<std::string> argv = health::CommandWords(text);
  if (argv.size() == 1 && argv[0] == "none") argv.clear();
  return argv;
}

void ApplyFaultFlags(const PluginFlags& flags, HealthConfig& health) {
  if (!flags.fault_table.empty()) health.fault_table = flags.fault_table;
  if (!flags.gpu_reset_command.empty()) health.reset_command = CommandArgv(flags.gpu_reset_command);
  if (!flags.gpu_self_test_command.empty())
    health.self_test_command = CommandArgv(flags.gpu_self_test_command);
  if (flags.pod_resources_socket == "none") {
    health.pod_resources_socket.clear();
  } else if (!flags.pod_resources_socket.empty()) {
    health.pod_resources_socket = flags.pod_resources_socket;
  }
  if (!flags.health_state_file.empty()) health.state_file = flags.health_state_file;
}

}  // namespace

void AddPluginFlags(CLI::App& app, PluginFlags& flags) {
  app.add_option("--config", flags.config_file, "YAML config file (env TESSERA_DP_CONFIG)");
  app.add_option("--root", flags.root, "host root to read devices from (default /)");
  app.add_option("--socket-dir", flags.socket_dir,
                 "kubelet device-plugin socket dir (default /var/lib/kubelet/device-plugins)");
  app.add_option("--cdi-dir", flags.cdi_dir, "where CDI specs are written (default /var/run/cdi)");
  app.add_option("--lease-file", flags.lease_file,
                 "node-local lease file (default /run/tessera/leases.json)");
  app.add_option("--device-list-strategy", flags.strategy,
                 "comma list of cdi-cri, cdi-annotations, device-specs, envvar");
  app.add_option("--allocation-policy", flags.policy, "distributed or packed (replicas)");
  app.add_option("--partition-table", flags.partition_table,
                 "NVLink fabric partition table: preset name or YAML/JSON file");
  app.add_option("--windows-snapshot", flags.windows_snapshot,
                 "Windows node: advertise DirectX adapters from this host snapshot "
                 "(env TESSERA_DP_WINDOWS_SNAPSHOT)");
  app.add_option("--windows-replicas", flags.windows_replicas,
                 "Windows node: advertise each adapter this many times (1..64)");
  app.add_option("--windows-isolation", flags.windows_isolation,
                 "Windows node: process (DirectX adapters, shared) or hyperv (dismounted GPUs, one "
                 "per container; env TESSERA_DP_WINDOWS_ISOLATION)");
  app.add_option("--fault-table", flags.fault_table,
                 "GPU fault table file over the built-in one (docs/faults.md)");
  app.add_option("--gpu-reset-command", flags.gpu_reset_command,
                 "resets a faulted GPU; {uuid}, {pci}, {index} replaced; none: never reset "
                 "(default: nvidia-smi -r -i {uuid})");
  app.add_option("--gpu-self-test-command", flags.gpu_self_test_command,
                 "self-test of a reset GPU before it is Healthy again (default: none)");
  app.add_option("--pod-resources-socket", flags.pod_resources_socket,
                 "kubelet's PodResources socket; none: Pods are not consulted "
                 "(default /var/lib/kubelet/pod-resources/kubelet.sock)");
  app.add_option("--health-state-file", flags.health_state_file,
                 "GPU fault history and recovery steps across restarts "
                 "(default /var/lib/tessera/device-plugin/gpu-health.json)");
  app.add_option("--log-level", flags.log_level, "debug, info, warn or error");
}

Result<Config> LoadPluginConfig(const PluginFlags& flags) {
  auto env = ProcessEnvironment();
  std::string file = flags.config_file;
  if (file.empty() && env.count("TESSERA_DP_CONFIG")) file = env["TESSERA_DP_CONFIG"];
  Config config;
  if (!file.empty()) {
    auto text = ReadBoundedFile(file, kMaxConfigFileBytes);
    if (!text) return text.error().WithContext("config");
    auto parsed = ParseConfig(*text);
    if (!parsed) return parsed.error().WithContext(file);
    config = *parsed;
  }
  if (auto s = ApplyEnvironment(env, &config); !s) return s.error();
  std::map<std::string, std::string> from_flags = {
      {"TESSERA_DP_ROOT", flags.root},
      {"TESSERA_DP_SOCKET_DIR", flags.socket_dir},
      {"TESSERA_DP_CDI_DIR", flags.cdi_dir},
      {"TESSERA_DP_LEASE_FILE", flags.lease_file},
      {"TESSERA_DP_DEVICE_LIST_STRATEGY", flags.strategy},
      {"TESSERA_DP_ALLOCATION_POLICY", flags.policy}};
  if (!flags.partition_table.empty())
    from_flags["TESSERA_DP_PARTITION_TABLE"] = flags.partition_table;
  if (auto s = ApplyEnvironment(from_flags, &config); !s) {
    return s.error().WithContext("flags");
  }
  // Windows nodes: a DirectX host snapshot instead of the PCI inventory.
  if (env.count("TESSERA_DP_WINDOWS_SNAPSHOT"))
    config.windows_snapshot = env["TESSERA_DP_WINDOWS_SNAPSHOT"];
  if (!flags.windows_snapshot.empty()) config.windows_snapshot = flags.windows_snapshot;
  if (flags.windows_replicas != 0) config.windows_replicas = flags.windows_replicas;
  if (env.count("TESSERA_DP_WINDOWS_ISOLATION"))
    config.windows_isolation = env["TESSERA_DP_WINDOWS_ISOLATION"];
  if (!flags.windows_isolation.empty()) config.windows_isolation = flags.windows_isolation;
  ApplyFaultFlags(flags, config.health);
  return config;
}

}  // namespace tessera::deviceplugin

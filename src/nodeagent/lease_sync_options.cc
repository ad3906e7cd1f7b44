#include "nodeagent/lease_sync_options.h"

#include <CLI/CLI.hpp>
#include <cstdlib>

#include "podresources/podresources.h"

namespace tessera::nodeagent {

LeaseSyncOptions::LeaseSyncOptions() : pod_resources_socket(podresources::kDefaultSocket) {}

namespace {

void AddInventoryFlags(CLI::App& app, LeaseSyncOptions& o) {
  app.add_option("--kubeconfig", o.kubeconfig, "kubeconfig (default: in-cluster service account)");
  app.add_option("--node", o.node, "This node's name (default: $NODE_NAME)");
  app.add_option("--lease-file", o.lease_file, "Lease file the device plugin reads")
      ->capture_default_str();
  app.add_option("--root", o.root, "Host root whose GPUs are published on the Node")
      ->capture_default_str();
  app.add_option("--partition-table", o.partition_table,
                 "This node's NVLink partition table (file or preset name), published with its "
                 "GPUs");
  app.add_option("--inventory-interval-ms", o.inventory_interval_ms,
                 "Re-read the inventory this often; 0: publish once")
      ->capture_default_str();
  app.add_option("--pod-resources-socket", o.pod_resources_socket,
                 "kubelet's PodResources socket, read for the devices kubelet gave leased Pods")
      ->capture_default_str();
  app.add_option("--pod-resources-interval-ms", o.pod_resources_interval_ms,
                 "Read PodResources this often; 0: never")
      ->capture_default_str();
}

void AddFabricFlags(CLI::App& app, LeaseSyncOptions& o) {
  app.add_option("--fabric-manager", o.fabric_manager,
                 "NVIDIA Fabric Manager API (host[:port] or unix:PATH): activate each leased "
                 "Pod's NVLink partition when its devices appear in PodResources, deactivate it "
                 "when they are gone");
  app.add_option("--nvfm-library", o.nvfm_library, "Fabric Manager client library")
      ->capture_default_str();
  app.add_option("--fabric-state", o.fabric_state, "Which lease holds which partition")
      ->capture_default_str();
  app.add_option("--fabric-interval-ms", o.fabric_interval_ms,
                 "Read PodResources for partitions this often")
      ->check(CLI::Range(50, 60000))
      ->capture_default_str();
}

void AddTelemetryFlags(CLI::App& app, LeaseSyncOptions& o) {
  app.add_option("--telemetry-interval-ms", o.telemetry_interval_ms,
                 "Measure the GPU processes of leased Pods this often (NVML); 0: never")
      ->capture_default_str();
  app.add_option("--telemetry-max-series", o.telemetry_max_series,
                 "Per-container series on /metrics at most; the rest is summed into "
                 "container=\"_other\"")
      ->capture_default_str();
  app.add_option("--metrics-listen", o.metrics_listen,
                 "HOST:PORT serving /metrics, /v1/telemetry and /healthz (default: none)");
  app.add_option("--metrics-token-file", o.endpoint.token_file,
                 "File holding the bearer token /metrics and /v1/telemetry ask for (a Secret's "
                 "key; re-read when it changes); needed unless --metrics-listen is loopback or "
                 "--metrics-anonymous says so");
  app.add_flag("--metrics-anonymous", o.endpoint.anonymous_off_loopback,
               "Serve /metrics and /v1/telemetry without a token off loopback too (a "
               "NetworkPolicy must keep everyone but the scraper out)");
  app.add_option("--metrics-max-connections", o.endpoint.max_connections,
                 "Connections the endpoint serves at once; accepting pauses there")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  app.add_option("--metrics-tls-cert", o.endpoint.tls.cert,
                 "PEM certificate (and chain): the endpoint speaks HTTPS (TLS 1.2+), the files "
                 "re-read when they change")
      ->check(CLI::ExistingFile);
  app.add_option("--metrics-tls-key", o.endpoint.tls.key, "PEM private key of --metrics-tls-cert")
      ->check(CLI::ExistingFile);
  app.add_option("--metrics-tls-client-ca", o.endpoint.tls.client_ca,
                 "PEM CAs whose client certificates the endpoint asks for and accepts")
      ->check(CLI::ExistingFile);
  o.endpoint.tls.flag_prefix = "--metrics-tls-";
  app.add_option("--metrics-timeout-ms", o.metrics_timeout_ms,
                 "Deadline for a connection's whole request header, and again for its answer")
      ->check(CLI::Range(100, 600000))
      ->capture_default_str();
  app.add_option("--nvml", o.nvml, "NVML library: telemetry, GPU module IDs (\"\" = none)")
      ->capture_default_str();
  app.add_option("--proc-dir", o.proc_dir, "The host's /proc (GPU processes' cgroups)")
      ->capture_default_str();
}

void AddGpuHealthFlags(CLI::App& app, LeaseSyncOptions& o) {
  app.add_flag("--gpu-health,!--no-gpu-health", o.gpu_health,
               "Watch this node's GPUs for faults (NVML of --nvml), publish each GPU's health "
               "with its GPUs, and reset and verify a faulted GPU once no Pod holds it");
  app.add_option("--fault-table", o.fault_table,
                 "Xid classification table over the built-in one (docs/faults.md)");
  app.add_option("--gpu-reset-command", o.gpu_reset_command,
                 "Resets a faulted GPU (split on spaces; {uuid}, {pci}, {index} replaced); \"\": "
                 "never reset, the GPU stays out")
      ->capture_default_str();
  app.add_option("--gpu-self-test-command", o.gpu_self_test_command,
                 "Tests a reset GPU before it returns (\"dcgmi diag -r 1 -i {index}\" reads DCGM's "
                 "verdict); default: NVML state only");
  app.add_option("--gpu-health-state", o.gpu_health_state,
                 "Each GPU's recovery step, kept across restarts")
      ->capture_default_str();
  app.add_option("--gpu-recovery-interval-ms", o.gpu_recovery_interval_ms,
                 "How often a faulted GPU's Pods and processes are looked for")
      ->check(CLI::Range(50, 600000))
      ->capture_default_str();
}

}  // namespace

void AddLeaseSyncFlags(CLI::App& app, LeaseSyncOptions& options) {
  AddInventoryFlags(app, options);
  AddFabricFlags(app, options);
  AddTelemetryFlags(app, options);
  AddGpuHealthFlags(app, options);
}

Status CheckLeaseSyncOptions(LeaseSyncOptions& options) {
  if (options.node.empty() && std::getenv("NODE_NAME")) options.node = std::getenv("NODE_NAME");
  if (options.node.empty()) return InvalidArgument("--node or NODE_NAME is required");
  const auto& tls = options.endpoint.tls;
  if (tls.cert.empty() != tls.key.empty() || (tls.cert.empty() && !tls.client_ca.empty()))
    return InvalidArgument(
        "--metrics-tls-cert and --metrics-tls-key go together (and --metrics-tls-client-ca "
        "needs them)");
  return Ok();
}

}  // namespace tessera::nodeagent

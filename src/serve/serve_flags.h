// tessera-serve's flags: one struct that CLI11 fills (AddServeFlags, in the order --help lists
// them), and the checks each value passes before anything is made or bound (docs/serve.md lists
// the rules). The API listener's address is api::ParseListen's to read; flag_checks.h and
// flag_paths.h hold the rules of single values.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "serve/flag_checks.h"
#include "serve/types.h"

namespace CLI {
class App;
}

namespace tessera::serve {

struct ServeFlags {
  std::string listen = "127.0.0.1:8080";
  serve::TlsFlags tls;
  std::string data_dir = "tessera-data";
  std::string root = "/";
  std::string backend = "local";
  std::string store;       // sqlite or cluster; empty: cluster with --backend kubernetes
  std::string kubeconfig;  // --backend kubernetes: empty = in-cluster service account
  std::string k8s_node;
  bool k8s_cilium = false;
  std::string k8s_nfs_mode = "inline";
  std::string k8s_gpu_api;  // empty: from API discovery
  // --backend kubernetes: published ports' Service type, and who may reach them from outside
  // the tenancy (CIDRs or namespace label selectors; empty: nobody).
  std::string publish_service_type = "ClusterIP";
  std::vector<std::string> publish_ingress_from;
  std::string placement_policy = "binpack";
  std::string lease_file = "/run/tessera/leases.json";
  std::string admin_token_file;     // default <data-dir>/admin.token
  std::string rate_limit = "50/s";  // per token, and per address without a valid token
  int rate_burst = 100;
  bool metrics_aggregate_public = false;
  std::string cdi_dir;  // the program starts it at cdi::kDefaultSpecDir
  std::string cdi_kind = "nvidia.com/gpu";
  std::optional<std::string> nvml;  // MIG facts, telemetry; default: libnvidia-ml.so.1 for root "/"
  // MIG by demand: "instances" makes and destroys idle MIG instances as MIG requests need them;
  // "off" leaves the layout to the operator (tessera mig apply).
  std::string mig_by_demand = "instances";
  // Profile tables of boards other than the H100 80GB (built in), for MIG by demand.
  std::vector<std::string> mig_profiles;
  std::string telemetry_interval = "10s";
  size_t telemetry_max_series = 10000;
  std::string telemetry_proc_dir;  // default <root>/proc
  std::string partition_table;     // file or preset name
  std::string fabric_manager;      // host[:port] or unix:PATH; empty: no fabric manager
  std::string nvfm_library = "libnvfm.so.1";
  std::string fabric_manager_timeout = "10s";  // each fabric-manager call's deadline
  std::string firmware_command;
  std::vector<std::string> firmware_per_gpu;  // BDF=PROGRAM
  int firmware_timeout_ms = 60000;
  std::string instance;
  std::string port_file;
  std::string log_level = "info";
  int io_threads = 1;
  int max_connections = 1024;
  int stop_grace_s = 10;
  bool synchronous_full = true;
  bool foreground_checkpoint = false;
  bool no_tenant_firewall = false;
  std::string publish_address = "127.0.0.1";  // where published container ports are reached
  std::string publish_ports = "30000-32767";  // the host ports handed out
  int publish_ports_per_tenancy = 64;         // what one tenancy may hold of them (0: no limit)
  std::string retain_finished = "168h";
  std::string container_log_max = "16Mi";  // each podman log's cap (local backend)
  std::string store_reserve = "256Mi";     // kept free on the data dir's file system
  size_t retain_finished_per_tenancy = 10000;
  std::string retention_sweep_interval = "1m";
  std::string audit_retention = "90d";
  int start_workers = 8;
  std::string scheduling = "fair";
  std::string fair_share_half_life = "1h";
  int reservations = 8;
  bool preemption = false;
  int default_pending_quota = 10000;
  // --backend kubernetes: several replicas, one leader (coordination.k8s.io/v1 Lease).
  bool leader_elect = false;
  std::string leader_elect_namespace;  // default $POD_NAMESPACE, else tessera-system
  std::string leader_elect_identity;   // default $POD_NAME, else <hostname>-<pid>
  int lease_duration_ms = 15000;
  int renew_deadline_ms = 10000;
  int retry_period_ms = 2000;
  // Shares of a GPU (docs/sharing.md).
  std::string share_reserve = "1Gi";
  bool share_across_tenancies = false;
  std::string share_grace = "10s";
  std::string share_check_interval = "1s";
  std::string share_timeslice;  // default|short|medium|long; empty: leave the policy alone
  std::string mps_root = "/run/tessera/mps";
  std::string mps_control = "nvidia-cuda-mps-control";
  int mps_shm_mib = 64;
  std::string mps_command_timeout = "5s";
  std::string nvidia_smi = "nvidia-smi";
  // GPU faults (docs/faults.md; fault_flags.cc).
  bool no_health = false;
  std::string fault_table;  // the operator's table over the built-in one
  std::string gpu_reset_command = "nvidia-smi -r -i {uuid}";
  std::string gpu_self_test_command;  // empty: verification by NVML state only
  std::string gpu_recovery_timeout = "5m";
  int recovery_max_attempts = 3;
  int max_faults = 3;
  std::string fault_window = "24h";
  std::string health_poll_interval = "5s";
};

// Every flag of ServeFlags on `app`, with its help text, range and default.
void AddServeFlags(CLI::App& app, ServeFlags& flags);

// The GPU fault flags (--fault-table, --gpu-reset-command, ...; fault_flags.cc).
void AddFaultFlags(CLI::App& app, ServeFlags& flags);
// --fault-table (read and parsed), --recovery-max-attempts, --max-faults and --fault-window into
// the service's options. InvalidArgument naming the flag.
Result<FaultOptions> FaultOptionsFrom(const ServeFlags& flags);

// --share-* and --mps-* into the service's options; `nvml` is the library the host was read with.
Result<SharingOptions> SharingOptionsFrom(const ServeFlags& flags, const std::string& nvml);

// The values' checks, in the order they are reported: every duration's and size's range, the
// sharing flags, --scheduling and --placement-policy. Integer ranges are CLI11's, at parse time.
Status CheckValueFlags(const ServeFlags& flags);

// Every path flag's shape and target (flag_paths.h), and the programs the operator named.
Status CheckPathFlags(const ServeFlags& flags);

}  // namespace tessera::serve

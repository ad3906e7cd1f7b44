// tessera-serve's flags (serve_flags.h).
#include "serve/serve_flags.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <initializer_list>
#include <utility>

#include "placement/placement.h"
#include "scheduling/scheduling.h"
#include "serve/flag_paths.h"
#include "serve/port_allocator.h"
#include "sharing/sharing.h"

namespace tessera::serve {
namespace {

// The API listener and its TLS (docs/tls.md).
void AddListenFlags(CLI::App& app, ServeFlags& flags) {
  app.add_option("--listen", flags.listen, "HOST:PORT to serve the API on (port 0: any)")
      ->capture_default_str();
  app.add_option("--tls-cert", flags.tls.cert,
                 "PEM certificate (then its chain) to serve HTTPS with; re-read when it changes");
  app.add_option("--tls-key", flags.tls.key,
                 "PEM private key of --tls-cert (not readable by other users)");
  app.add_option("--tls-client-ca", flags.tls.client_ca,
                 "PEM CA(s): require client certificates signed by one of them");
  app.add_flag("--insecure-http", flags.tls.insecure_http,
               "Serve plain HTTP on a non-loopback --listen address (without TLS)");
}

// Where the state lives, what runs the containers and where they are placed.
void AddPlacementFlags(CLI::App& app, ServeFlags& flags) {
  app.add_option("--data-dir", flags.data_dir, "Store, admin token")->capture_default_str();
  app.add_option("--root", flags.root, "Host root to read (a fixture tree in tests)")
      ->capture_default_str();
  app.add_option("--backend", flags.backend,
                 "local (podman), kubernetes (Pods through the API server) or null (runs "
                 "nothing; benchmarks)")
      ->check(CLI::IsMember({"local", "kubernetes", "null"}))
      ->capture_default_str();
  app.add_option("--store", flags.store,
                 "Where the records live: sqlite (a file under --data-dir) or cluster (objects "
                 "of the API server, shared by every replica; default with --backend kubernetes)")
      ->check(CLI::IsMember({"sqlite", "cluster"}));
  app.add_option("--kubeconfig", flags.kubeconfig,
                 "kubeconfig for --backend kubernetes (default: in-cluster service account)");
  app.add_option("--k8s-node", flags.k8s_node,
                 "Place only on this node (default: every node that publishes its GPUs)");
  app.add_option("--placement-policy", flags.placement_policy,
                 "How --backend kubernetes chooses a node: binpack, spread or first-fit")
      ->capture_default_str();
  app.add_flag("--k8s-cilium", flags.k8s_cilium,
               "Also create a CiliumNetworkPolicy per tenancy (clusters running Cilium)");
  app.add_option("--k8s-nfs-mode", flags.k8s_nfs_mode,
                 "NFS entitlements as inline nfs volumes or a PV/PVC pair each")
      ->check(CLI::IsMember({"inline", "pv"}))
      ->capture_default_str();
  app.add_option("--k8s-gpu-api", flags.k8s_gpu_api,
                 "How Pods get their GPUs: dra (a ResourceClaim pinned to the leased GPUs) or "
                 "device-plugin (default: dra when the cluster serves resource.k8s.io/v1)")
      ->check(CLI::IsMember({"dra", "device-plugin"}));
  app.add_option("--publish-service-type", flags.publish_service_type,
                 "--backend kubernetes: the Service of a container's published ports: "
                 "ClusterIP, NodePort or LoadBalancer")
      ->check(CLI::IsMember({"ClusterIP", "NodePort", "LoadBalancer"}))
      ->capture_default_str();
  app.add_option("--publish-ingress-from", flags.publish_ingress_from,
                 "--backend kubernetes: who may reach published ports from outside the "
                 "container's tenancy: CIDRs (10.0.0.0/8,192.168.0.0/16) or a namespace label "
                 "selector (kubernetes.io/metadata.name=ingress-nginx); repeatable (default: "
                 "nobody)");
  app.add_option("--lease-file", flags.lease_file, "Node-local lease file for the device plugin")
      ->capture_default_str();
  app.add_flag("--no-tenant-firewall", flags.no_tenant_firewall,
               "Do not add the iptables rules that fence each tenancy network (hosts without "
               "iptables; the --internal networks still isolate)");
  app.add_option("--publish-address", flags.publish_address,
                 "Host address published container ports are reached on (local backend)")
      ->capture_default_str();
  app.add_option("--publish-ports", flags.publish_ports,
                 "Range LOW-HIGH of host ports handed to published container ports, within "
                 "1024-65535 (local backend)")
      ->capture_default_str();
  app.add_option("--publish-ports-per-tenancy", flags.publish_ports_per_tenancy,
                 "Host ports one tenancy's containers may hold at once (local backend; 0: no "
                 "limit), so no tenancy takes the range from the others")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
}

// Who may call the API, and how often.
void AddAccessFlags(CLI::App& app, ServeFlags& flags) {
  app.add_option("--admin-token-file", flags.admin_token_file,
                 "Admin token file (default <data-dir>/admin.token; created 0600 when missing)");
  app.add_option("--rate-limit", flags.rate_limit,
                 "Requests per second per token (a tenancy's rateLimit replaces it; the admin "
                 "token has none), and per source address for requests without a valid token: "
                 "\"50/s\", or off")
      ->capture_default_str();
  app.add_option("--rate-burst", flags.rate_burst,
                 "Requests a token (or address) may send at once after a quiet spell")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_flag("--metrics-aggregate-public", flags.metrics_aggregate_public,
               "Answer GET /metrics without a token with the aggregate series only (no tenancy, "
               "container or GPU labels); every series still needs the admin or a metrics token");
}

// This host's GPUs: CDI specs, NVML, telemetry, NVLink partitions, firmware checks.
void AddHostFlags(CLI::App& app, ServeFlags& flags) {
  app.add_option("--cdi-dir", flags.cdi_dir, "Where to write the CDI specs")->capture_default_str();
  app.add_option("--cdi-kind", flags.cdi_kind, "CDI kind of the GPU spec")->capture_default_str();
  app.add_option("--nvml", flags.nvml,
                 "NVML library for MIG profiles and UUIDs (default: libnvidia-ml.so.1 when --root "
                 "is /, none otherwise)");
  app.add_option("--mig-by-demand", flags.mig_by_demand,
                 "instances: make the MIG instances waiting requests need on GPUs in MIG mode, "
                 "destroying only idle ones; off: serve the instances that exist")
      ->check(CLI::IsMember({"off", "instances"}))
      ->capture_default_str();
  app.add_option("--mig-profiles", flags.mig_profiles,
                 "A MIG profile table file (data/mig-profiles/*.yaml) for a board other than the "
                 "H100 80GB, whose table is built in; repeatable");
  app.add_option("--telemetry-interval", flags.telemetry_interval,
                 "How often this host's GPUs and their processes are measured through NVML "
                 "(100ms to 1h)")
      ->capture_default_str();
  app.add_option("--telemetry-max-series", flags.telemetry_max_series,
                 "Per-container series on /metrics at most; the rest is summed into "
                 "container=\"_other\"")
      ->check(CLI::Range(size_t{100}, size_t{10000000}))
      ->capture_default_str();
  app.add_option("--telemetry-proc-dir", flags.telemetry_proc_dir,
                 "Where GPU processes' cgroups are read (default <root>/proc)");
  app.add_option("--partition-table", flags.partition_table,
                 "NVLink fabric partition table (file, or preset name such as hgx-h100-8gpu)");
  app.add_option("--fabric-manager", flags.fabric_manager,
                 "NVIDIA Fabric Manager API (host[:port], port 6666 by default, or unix:PATH): "
                 "place whole fabric partitions and activate each container's before it starts");
  app.add_option("--nvfm-library", flags.nvfm_library,
                 "Fabric Manager client library (libnvfm.so.1, or a path)")
      ->capture_default_str();
  app.add_option("--fabric-manager-timeout", flags.fabric_manager_timeout,
                 "Deadline of each fabric-manager call (100ms to 5m): one that does not answer "
                 "fails that activation, not the service")
      ->capture_default_str();
  app.add_option("--firmware-check-command", flags.firmware_command,
                 "Run 'PROGRAM [ARGS] <PCI address>' after each lease (exit 0 = pass) instead of "
                 "comparing the option ROM hash");
  app.add_option("--firmware-check", flags.firmware_per_gpu,
                 "PCI_ADDRESS=PROGRAM: the check for one GPU (repeatable)");
  app.add_option("--firmware-check-timeout-ms", flags.firmware_timeout_ms, "Check time limit")
      ->check(CLI::Range(1, 3600 * 1000))
      ->capture_default_str();
}

// The process: its label, port file, log level, threads and connections.
void AddProcessFlags(CLI::App& app, ServeFlags& flags) {
  app.add_option("--instance", flags.instance,
                 "Label value of this service's containers (default: from --data-dir)");
  app.add_option("--port-file", flags.port_file, "Write the bound port here");
  // spdlog takes any other name for "off": a typo would silence every line.
  app.add_option("--log-level", flags.log_level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember(
          {"trace", "debug", "info", "warn", "warning", "error", "err", "critical", "off"}))
      ->capture_default_str();
  app.add_option("--io-threads", flags.io_threads, "HTTP I/O threads")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--max-connections", flags.max_connections,
                 "Open HTTP connections at most (lowered to stay below the open-file limit)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_flag("--foreground-checkpoint", flags.foreground_checkpoint,
               "Let the commit that fills the WAL copy it back (SQLite's default) instead of a "
               "checkpoint thread; for comparisons");
}

// Stopping containers, their logs, and how long records and audit entries are kept.
void AddRetentionFlags(CLI::App& app, ServeFlags& flags) {
  app.add_option("--stop-grace-s", flags.stop_grace_s, "SIGTERM to SIGKILL on DELETE")
      ->check(CLI::Range(0, 3600))
      ->capture_default_str();
  app.add_option("--container-log-max", flags.container_log_max,
                 "Cap of each container's log under <data-dir>/containers (64Ki to 1Ti): podman "
                 "empties it when the next line would pass this, so it keeps the latest output")
      ->capture_default_str();
  app.add_option("--store-reserve", flags.store_reserve,
                 "Free space kept on the data directory's file system for the store (0 to 1Ti; "
                 "0: off): submissions and tenancy changes are refused (503) when less is left "
                 "once the live containers' logs may reach --container-log-max")
      ->capture_default_str();
  app.add_option("--retain-finished", flags.retain_finished,
                 "Remove exited/failed container records this long after they finished "
                 "(ms, s, m, h, d)")
      ->capture_default_str();
  app.add_option("--retain-finished-per-tenancy", flags.retain_finished_per_tenancy,
                 "Keep at most this many finished container records per tenancy (oldest go "
                 "first)")
      ->check(CLI::Range(size_t{1}, size_t{100000000}))
      ->capture_default_str();
  app.add_option("--retention-sweep-interval", flags.retention_sweep_interval,
                 "How often the retention policy is applied")
      ->capture_default_str();
  app.add_option("--audit-retention", flags.audit_retention,
                 "Delete audit records this long after they were written (h, d; 1h to 3660d)")
      ->capture_default_str();
}

// Which pending request goes next (docs/scheduling.md).
void AddSchedulingFlags(CLI::App& app, ServeFlags& flags) {
  app.add_option("--start-workers", flags.start_workers,
                 "Container starts and stops run this many at a time")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--scheduling", flags.scheduling,
                 "Which pending GPU container goes next: fair (weighted fair share between "
                 "tenancies, priorities, quotas) or fifo")
      ->capture_default_str();
  app.add_option("--fair-share-half-life", flags.fair_share_half_life,
                 "Half-life of the recent GPU usage fair share is measured on (e.g. 30m, 1h)")
      ->capture_default_str();
  app.add_option("--reservations", flags.reservations,
                 "Pending requests that do not fit and reserve the GPUs they get first, per "
                 "scheduling pass (0: plain backfill)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  app.add_option("--default-pending-quota", flags.default_pending_quota,
                 "Requests a tenancy may have waiting at once unless its policy sets quota.pending "
                 "(a policy may raise it, null: unlimited)")
      ->check(CLI::Range(0, scheduling::kMaxQuotaPending))
      ->capture_default_str();
  app.add_flag("--preemption", flags.preemption,
               "Stop preemptible containers for a higher-priority or under-share tenancy's "
               "request (reason \"preempted\")");
}

// --backend kubernetes: several replicas, one leader.
void AddLeaderElectionFlags(CLI::App& app, ServeFlags& flags) {
  app.add_flag("--leader-elect", flags.leader_elect,
               "--backend kubernetes: run placement, the lease flow and checks only while this "
               "replica holds the coordination.k8s.io/v1 Lease tessera-control-plane");
  app.add_option("--leader-elect-namespace", flags.leader_elect_namespace,
                 "Namespace of the Lease (default $POD_NAMESPACE, else tessera-system)");
  app.add_option("--leader-elect-identity", flags.leader_elect_identity,
                 "This replica's holderIdentity (default $POD_NAME, else <hostname>-<pid>)");
  app.add_option("--leader-elect-lease-duration-ms", flags.lease_duration_ms,
                 "How long a Lease not renewed keeps others out (whole seconds)")
      ->check(CLI::Range(1000, 3600 * 1000))
      ->capture_default_str();
  app.add_option("--leader-elect-renew-deadline-ms", flags.renew_deadline_ms,
                 "A leader stops placing when it has not renewed for this long (< lease duration)")
      ->check(CLI::Range(100, 3600 * 1000))
      ->capture_default_str();
  app.add_option("--leader-elect-retry-period-ms", flags.retry_period_ms,
                 "Between attempts to take or renew the Lease")
      ->check(CLI::Range(10, 3600 * 1000))
      ->capture_default_str();
}

// Shares of a GPU (docs/sharing.md).
void AddSharingFlags(CLI::App& app, ServeFlags& flags) {
  app.add_option("--share-reserve", flags.share_reserve,
                 "Memory kept free on every shared GPU: its shares add up to at most its memory "
                 "less this (a quantity, or 0)")
      ->capture_default_str();
  app.add_flag("--share-across-tenancies", flags.share_across_tenancies,
               "Let one time-sliced GPU hold several tenancies' containers (never an MPS GPU: its "
               "daemon, pipe directory and shm stay one tenancy's). Risk: a time-sliced GPU is one "
               "fault domain that isolates no memory, so one tenant's fatal GPU fault ends every "
               "tenant's work on it");
  app.add_option("--share-grace", flags.share_grace,
                 "The watchdog stops a container above its memory share for longer than this "
                 "(100ms to 1h)")
      ->capture_default_str();
  app.add_option("--share-check-interval", flags.share_check_interval,
                 "How often each MPS daemon is checked and the watchdog samples (10ms to 1m)")
      ->capture_default_str();
  app.add_option("--share-timeslice", flags.share_timeslice,
                 "Time-sliced GPUs: nvidia-smi compute-policy --set-timeslice default|short|"
                 "medium|long while shared (default: leave the policy alone)");
  app.add_option("--mps-root", flags.mps_root,
                 "Where each shared GPU's MPS daemon keeps <uuid>/{pipe,log,shm,ready} (absolute, "
                 "no links)")
      ->capture_default_str();
  app.add_option("--mps-control", flags.mps_control, "The nvidia-cuda-mps-control to run")
      ->capture_default_str();
  app.add_option("--mps-shm-mib", flags.mps_shm_mib,
                 "Size of each MPS daemon's private shm (the clients' /dev/shm), MiB")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  app.add_option("--mps-command-timeout", flags.mps_command_timeout,
                 "An MPS daemon slower than this to answer counts as hung (100ms to 5m)")
      ->capture_default_str();
  app.add_option("--nvidia-smi", flags.nvidia_smi, "nvidia-smi, for --share-timeslice")
      ->capture_default_str();
}

}  // namespace

void AddServeFlags(CLI::App& app, ServeFlags& flags) {
  AddListenFlags(app, flags);
  AddPlacementFlags(app, flags);
  AddAccessFlags(app, flags);
  AddHostFlags(app, flags);
  AddProcessFlags(app, flags);
  AddRetentionFlags(app, flags);
  AddSchedulingFlags(app, flags);
  AddLeaderElectionFlags(app, flags);
  AddSharingFlags(app, flags);
  AddFaultFlags(app, flags);
}

Result<SharingOptions> SharingOptionsFrom(const ServeFlags& flags, const std::string& nvml) {
  SharingOptions out;
  if (flags.share_reserve == "0") {
    out.reserve_bytes = 0;
  } else {
    auto reserve = sharing::ParseMemory(flags.share_reserve);
    if (!reserve) return reserve.error().WithContext("--share-reserve");
    out.reserve_bytes = *reserve;
  }
  out.across_tenancies = flags.share_across_tenancies;
  auto grace = ParseDurationFlag(kShareGraceFlag, flags.share_grace);
  if (!grace) return grace.error();
  out.grace = *grace;
  auto interval = ParseDurationFlag(kShareCheckIntervalFlag, flags.share_check_interval);
  if (!interval) return interval.error();
  out.interval = *interval;
  if (!flags.share_timeslice.empty()) {
    const std::vector<std::string> names = {"default", "short", "medium", "long"};
    auto it = std::find(names.begin(), names.end(), flags.share_timeslice);
    if (it == names.end())
      return InvalidArgument("--share-timeslice: want default, short, medium or long");
    out.timeslice = static_cast<int>(it - names.begin());
  }
  out.nvidia_smi = flags.nvidia_smi;
  out.nvml_library = nvml.empty() ? "libnvidia-ml.so.1" : nvml;
  out.mps.root = flags.mps_root;
  out.mps.control_binary = flags.mps_control;
  out.mps.shm_bytes = static_cast<uint64_t>(flags.mps_shm_mib) << 20;
  auto timeout = ParseDurationFlag(kMpsCommandTimeoutFlag, flags.mps_command_timeout);
  if (!timeout) return timeout.error();
  out.mps.command_timeout = *timeout;
  return out;
}

Status CheckValueFlags(const ServeFlags& flags) {
  const std::pair<DurationFlag, const std::string*> durations[] = {
      {kShareGraceFlag, &flags.share_grace},
      {kShareCheckIntervalFlag, &flags.share_check_interval},
      {kMpsCommandTimeoutFlag, &flags.mps_command_timeout},
      {kTelemetryIntervalFlag, &flags.telemetry_interval},
      {kRetainFinishedFlag, &flags.retain_finished},
      {kRetentionSweepIntervalFlag, &flags.retention_sweep_interval},
      {kAuditRetentionFlag, &flags.audit_retention},
      {kFairShareHalfLifeFlag, &flags.fair_share_half_life},
      {kFabricManagerTimeoutFlag, &flags.fabric_manager_timeout},
      {kFaultWindowFlag, &flags.fault_window},
      {kHealthPollIntervalFlag, &flags.health_poll_interval},
      {kGpuRecoveryTimeoutFlag, &flags.gpu_recovery_timeout}};
  for (const auto& [flag, text] : durations)
    if (auto parsed = ParseDurationFlag(flag, *text); !parsed) return parsed.error();
  for (const auto& [flag, text] : {std::pair{kContainerLogMaxFlag, &flags.container_log_max},
                                   std::pair{kStoreReserveFlag, &flags.store_reserve}})
    if (auto parsed = ParseSizeFlag(flag, *text); !parsed) return parsed.error();
  if (auto sharing = SharingOptionsFrom(flags, ""); !sharing) return sharing.error();
  if (auto faults = FaultOptionsFrom(flags); !faults) return faults.error();
  if (auto mode = scheduling::ParseMode(flags.scheduling); !mode)
    return mode.error().WithContext("--scheduling");
  if (auto policy = placement::ParsePolicy(flags.placement_policy); !policy)
    return policy.error().WithContext("--placement-policy");
  if (auto publish = ParsePublishFlags(flags.publish_address, flags.publish_ports); !publish)
    return publish.error();
  return Ok();
}

Status CheckPathFlags(const ServeFlags& flags) {
  // Paths that must be given, then those that may be left empty.
  std::vector<std::pair<std::string_view, std::string>> paths = {
      {"--root", flags.root}, {"--data-dir", flags.data_dir}, {"--cdi-dir", flags.cdi_dir}};
  for (const auto& [flag, path] : std::initializer_list<std::pair<std::string_view, std::string>>{
           {"--lease-file", flags.lease_file},
           {"--admin-token-file", flags.admin_token_file},
           {"--port-file", flags.port_file},
           {"--telemetry-proc-dir", flags.telemetry_proc_dir},
           {"--nvml", flags.nvml.value_or("")},
           {"--kubeconfig", flags.kubeconfig},
           {"--nvfm-library", flags.nvfm_library},
           {"--fault-table", flags.fault_table}})
    if (!path.empty()) paths.emplace_back(flag, path);
  for (const auto& [flag, path] : paths)
    if (auto status = CheckPathText(flag, path); !status) return status;
  // Spliced into podman's --mount for every MPS share.
  if (auto status = CheckMountSourcePath("--mps-root", flags.mps_root); !status) return status;

  std::vector<Status> checks = {CheckDirectory("--root", flags.root),
                                CheckDirectoryToMake("--data-dir", flags.data_dir),
                                CheckDirectoryToMake("--cdi-dir", flags.cdi_dir),
                                CheckDirectoryToMake("--mps-root", flags.mps_root),
                                CheckNoSymlinks("--mps-root", flags.mps_root),
                                CheckLibrary("--nvml", flags.nvml.value_or("")),
                                CheckLibrary("--nvfm-library", flags.nvfm_library)};
  if (!flags.lease_file.empty())
    checks.push_back(CheckFileToWrite("--lease-file", flags.lease_file));
  if (!flags.port_file.empty()) checks.push_back(CheckFileToWrite("--port-file", flags.port_file));
  if (!flags.telemetry_proc_dir.empty())
    checks.push_back(CheckDirectory("--telemetry-proc-dir", flags.telemetry_proc_dir));
  // A program the operator named must be there; the default MPS control daemon is looked for once
  // the GPUs that can be shared are known (tessera-serve), nvidia-smi whenever --share-timeslice
  // needs it.
  const ServeFlags defaults;
  if (flags.mps_control != defaults.mps_control)
    checks.push_back(CheckProgram("--mps-control", flags.mps_control));
  if (flags.nvidia_smi != defaults.nvidia_smi || !flags.share_timeslice.empty())
    checks.push_back(CheckProgram("--nvidia-smi", flags.nvidia_smi));
  if (!flags.no_health && flags.gpu_reset_command != defaults.gpu_reset_command &&
      !flags.gpu_reset_command.empty())
    checks.push_back(
        CheckProgram("--gpu-reset-command", std::string(CommandProgram(flags.gpu_reset_command))));
  if (!flags.no_health && !flags.gpu_self_test_command.empty())
    checks.push_back(CheckProgram("--gpu-self-test-command",
                                  std::string(CommandProgram(flags.gpu_self_test_command))));
  if (!flags.firmware_command.empty())
    checks.push_back(CheckProgram("--firmware-check-command",
                                  std::string(CommandProgram(flags.firmware_command))));
  for (const auto& entry : flags.firmware_per_gpu) {
    const auto equals = entry.find('=');
    if (equals == std::string::npos || equals == 0)
      return InvalidArgument("--firmware-check " + entry + ": want PCI_ADDRESS=PROGRAM");
    checks.push_back(
        CheckProgram("--firmware-check", std::string(CommandProgram(entry.substr(equals + 1)))));
  }
  for (auto& status : checks)
    if (!status) return status;
  return Ok();
}

}  // namespace tessera::serve

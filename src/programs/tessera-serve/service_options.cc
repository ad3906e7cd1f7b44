// The service's options from the flags: firmware checks, sharing, retention, the store's
// reserve, telemetry, rate limits, scheduling, placement and the NVLink partition table. The
// values were checked (CheckFlags); what only the whole set can tell is checked here.
#include <unistd.h>

#include "common/bounded_file.h"
#include "placement/placement.h"
#include "serve/rate_limit.h"
#include "telemetry/telemetry.h"
#include "topology/topology.h"
#include "wiring.h"

namespace tessera::serve_program {
namespace {

// A duration flag's value, in its range (CheckFlags).
std::chrono::milliseconds DurationOf(const serve::DurationFlag& flag, const std::string& text) {
  auto parsed = serve::ParseDurationFlag(flag, text);
  if (!parsed) Die(parsed.error());
  return *parsed;
}

void SetFirmwareOptions(const ServeFlags& flags, serve::ServiceOptions& options) {
  options.firmware.command = flags.firmware_command;
  options.firmware.timeout = std::chrono::milliseconds(flags.firmware_timeout_ms);
  for (const auto& entry : flags.firmware_per_gpu) {
    auto equals = entry.find('=');
    if (equals == std::string::npos || equals == 0)
      Die(InvalidArgument("--firmware-check " + entry + ": want PCI_ADDRESS=PROGRAM"));
    options.firmware.per_gpu[entry.substr(0, equals)] = entry.substr(equals + 1);
  }
}

void SetRetentionOptions(const ServeFlags& flags, const DataDir& data,
                         serve::ServiceOptions& options) {
  options.retention.max_age = DurationOf(serve::kRetainFinishedFlag, flags.retain_finished);
  options.retention.per_tenancy = flags.retain_finished_per_tenancy;
  options.retention.sweep_interval =
      DurationOf(serve::kRetentionSweepIntervalFlag, flags.retention_sweep_interval);
  options.audit_retention = DurationOf(serve::kAuditRetentionFlag, flags.audit_retention);
  options.start_workers = flags.start_workers;
  // In range (CheckFlags). Logs are the local backend's; the kubelet caps Pods' logs. A store
  // in the cluster has no file system here to keep a reserve on.
  auto reserve = serve::ParseSizeFlag(serve::kStoreReserveFlag, flags.store_reserve);
  auto log_max = serve::ParseSizeFlag(serve::kContainerLogMaxFlag, flags.container_log_max);
  if (!reserve) Die(reserve.error());
  if (!log_max) Die(log_max.error());
  if (data.store_kind != "cluster") options.store_reserve.reserve_bytes = *reserve;
  if (flags.backend == "local") options.store_reserve.log_max_bytes = *log_max;
}

void SetTelemetryOptions(const ServeFlags& flags, const HostGpus& host,
                         serve::ServiceOptions& options) {
  options.telemetry.interval = DurationOf(serve::kTelemetryIntervalFlag, flags.telemetry_interval);
  options.telemetry.max_series = flags.telemetry_max_series;
  options.rate_limit = {*serve::ParseRateFlag(flags.rate_limit),
                        static_cast<double>(flags.rate_burst)};
  options.telemetry.nvml_library = host.nvml_library;
  options.telemetry.proc_dir =
      flags.telemetry_proc_dir.empty() ? host.root + "/proc" : flags.telemetry_proc_dir;
  char hostname[256] = {};
  ::gethostname(hostname, sizeof hostname - 1);
  options.telemetry.hostname = hostname;
  if (!host.fleet_mode)
    options.telemetry.gpus = telemetry::GpuIdentitiesOf(host.inventory, options.telemetry.hostname);
}

void SetSchedulingOptions(const ServeFlags& flags, serve::ServiceOptions& options) {
  auto mode = scheduling::ParseMode(flags.scheduling);
  if (!mode) Die(mode.error().WithContext("--scheduling"));
  options.scheduling.mode = *mode;
  const auto half_life = DurationOf(serve::kFairShareHalfLifeFlag, flags.fair_share_half_life);
  options.scheduling.half_life_s = static_cast<double>(half_life.count()) / 1000.0;
  options.scheduling.max_reservations = flags.reservations;
  options.scheduling.preemption = flags.preemption;
  options.scheduling.default_quota_pending = flags.default_pending_quota;
  if (auto valid = scheduling::ValidateSchedulerOptions(options.scheduling); !valid)
    Die(valid.error().WithContext("--fair-share-half-life/--reservations"));
  auto policy = placement::ParsePolicy(flags.placement_policy);
  if (!policy) Die(policy.error().WithContext("--placement-policy"));
  options.policy = *policy;
}

// --partition-table: a file, else a preset's name.
void SetPartitionTable(const ServeFlags& flags, bool fleet_mode, serve::ServiceOptions& options) {
  if (fleet_mode && !flags.partition_table.empty())
    Die(
        InvalidArgument("--partition-table: with --backend kubernetes every node publishes its own "
                        "(tessera-lease-sync --partition-table)"));
  if (flags.partition_table.empty()) return;
  Result<topology::PartitionTable> table = InvalidArgument("");
  auto text = ReadBoundedFile(flags.partition_table, kMaxConfigFileBytes);
  if (text) {
    table = topology::ParsePartitionTableFile(flags.partition_table, *text);
  } else if (text.error().category == ErrorCategory::kNotFound) {
    table = topology::PresetTable(flags.partition_table);
  } else {
    table = text.error();
  }
  if (!table) Die(table.error().WithContext("--partition-table"));
  options.partition_table = std::move(*table);
}

}  // namespace

serve::ServiceOptions ServiceOptionsFrom(const ServeFlags& flags, const DataDir& data,
                                         const HostGpus& host) {
  serve::ServiceOptions options;
  options.root = host.root;
  options.data_dir = data.path;
  options.lease_file = flags.lease_file;
  options.cdi_kind = flags.cdi_kind;
  options.stop_grace = std::chrono::seconds(flags.stop_grace_s);
  SetFirmwareOptions(flags, options);
  options.fleet = host.fleet_mode;
  options.only_node = flags.k8s_node;
  auto sharing_options = serve::SharingOptionsFrom(flags, host.nvml_library);
  if (!sharing_options) Die(sharing_options.error());
  options.sharing = std::move(*sharing_options);
  auto fault_options = serve::FaultOptionsFrom(flags);
  if (!fault_options) Die(fault_options.error());
  options.faults = std::move(*fault_options);
  SetRetentionOptions(flags, data, options);
  SetTelemetryOptions(flags, host, options);
  SetSchedulingOptions(flags, options);
  SetPartitionTable(flags, host.fleet_mode, options);
  auto publish = serve::ParsePublishFlags(flags.publish_address, flags.publish_ports);
  if (!publish) Die(publish.error());
  options.publish = std::move(*publish);
  options.publish.per_tenancy = flags.publish_ports_per_tenancy;
  options.mig_shaper = HostMigShaper(flags, host);
  return options;
}

}  // namespace tessera::serve_program

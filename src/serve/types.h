// Values the service's parts and the API edge share: the service's options, who is calling, and
// the results of its operations.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "fleet/fleet.h"
#include "mps/mps.h"
#include "placement/placement.h"
#include "scheduling/scheduling.h"
#include "serve/bounds.h"
#include "serve/port_allocator.h"
#include "serve/rate_limit.h"
#include "serve/store_reserve.h"
#include "telemetry/telemetry.h"
#include "topology/topology.h"

namespace tessera::serve {

class MigShaper;

struct FirmwareCheckOptions {
  // Program run as `PROGRAM <PCI address>` for every GPU (exit 0 = pass); empty: compare the
  // SHA-256 of the device's option ROM (sysfs `rom` under the host root) with its baseline.
  std::string command;
  std::map<std::string, std::string> per_gpu;  // PCI address -> program, overrides `command`
  std::chrono::milliseconds timeout{60000};
};

// Shares of a GPU (MPS or time-slicing), docs/serve.md "Shares of a GPU".
struct SharingOptions {
  mps::Options mps;  // where daemons live, the control binary, shm size, timeouts
  // Kept free on every shared GPU: the shares on one GPU add up to at most its memory less this.
  uint64_t reserve_bytes = uint64_t{1} << 30;
  // Fault domain: by default a shared GPU holds one tenancy's containers only.
  bool across_tenancies = false;
  // The watchdog stops a container above its memory share for longer than this.
  std::chrono::milliseconds grace{10000};
  // How often each MPS daemon is checked and the watchdog samples.
  std::chrono::milliseconds interval{1000};
  // Time-sliced GPUs: `nvidia-smi compute-policy -i <uuid> --set-timeslice N` (0 default, 1
  // short, 2 medium, 3 long) when the first share arrives, and back to 0 after the last; -1
  // leaves the policy alone.
  int timeslice = -1;
  std::string nvidia_smi = "nvidia-smi";
  std::string nvml_library = "libnvidia-ml.so.1";  // compute modes
  // The GPU processes and the containers they belong to, each pass (the telemetry collector's
  // attribution). Unset: no watchdog, and time-sliced shares are enforced by nothing.
  std::function<Result<std::vector<sharing::ProcessUse>>()> measure;
};

// GPU telemetry of this host (embedded mode): --telemetry-interval, --telemetry-max-series,
// --nvml, --telemetry-proc-dir.
struct TelemetryOptions {
  std::string nvml_library;  // empty: off
  std::string proc_dir = "/proc";
  std::chrono::milliseconds interval{10000};
  size_t max_series = 10000;
  std::string hostname;                      // the Hostname label
  std::vector<telemetry::GpuIdentity> gpus;  // this host's NVIDIA GPUs on the nvidia driver
};

// GPU faults (docs/faults.md): how signals are classified and how often recovery tries.
struct FaultOptions {
  std::optional<health::XidTable> table;  // unset: health::XidTable::Default()
  health::ClassifierOptions classifier;
  health::RecoveryPolicy policy;  // firmware_step: set by the service (embedded mode)
  // While a faulted GPU waits for its processes to go: how often it is looked at again.
  std::chrono::milliseconds drain_poll{1000};
};

struct ServiceOptions {
  std::string root = "/";  // host root (a fixture tree in tests)
  std::string data_dir = "tessera-data";
  std::string lease_file = "/run/tessera/leases.json";
  std::string cdi_kind = "nvidia.com/gpu";  // GPUs are given as <cdi_kind>=<UUID or PCI address>
  std::optional<topology::PartitionTable> partition_table;  // partition mode when set
  FirmwareCheckOptions firmware;
  FaultOptions faults;
  std::chrono::seconds stop_grace{10};
  // Fleet mode (Kubernetes backend): the GPUs are those the nodes publish (UpdateNodes), not this
  // host's; placement chooses a node by `policy`, then GPUs on it with the topology chooser.
  bool fleet = false;
  std::string only_node;  // fleet mode: place only on this node (empty: any)
  placement::Policy policy = placement::Policy::kBinpack;
  RetentionOptions retention;
  // Audit records older than this are deleted (by the retention sweep, in bounded batches).
  std::chrono::milliseconds audit_retention = std::chrono::hours(24 * 90);
  // Backend starts and stops run this many at a time, so one slow start (an image pull) does not
  // hold back every other tenancy's.
  int start_workers = 8;
  // Set when several replicas share the store (Kubernetes mode, state in the cluster): brings
  // the model up to date with the store (a relist). Reconciliation with the backend then waits
  // until this replica leads (StartLeading), after this resync, instead of running at Create.
  std::function<Status()> resync;
  // Which pending GPU container goes next: fair share by weight (default) or FIFO, reservations
  // for requests that do not fit, preemption, the default pending quota. `scheduling.placement`
  // follows `policy`.
  scheduling::SchedulerOptions scheduling;
  SharingOptions sharing;
  // More Prometheus series for /metrics from parts the service does not own (the fabric
  // manager's activator); called on every scrape, from the HTTP server's threads.
  std::function<std::string()> extra_metrics;
  TelemetryOptions telemetry;
  // Space kept free on data_dir's file system: submissions and tenancy changes are refused
  // below it (store_reserve.h).
  StoreReserve store_reserve;
  // Where the admin token lives (POST /v1/admin-token:rotate replaces it); empty: rotation is
  // refused (the replicas of Kubernetes mode share theirs through a Secret).
  std::string admin_token_file;
  // Requests per token, and per source address for requests without a valid token; a tenancy's
  // own limit (PUT /v1/tenancies/{name} rateLimit) replaces the first. The admin token has none.
  RateLimit rate_limit{50, 100};
  // Published ports (embedded mode): the host address and the range of host ports handed out
  // (--publish-address, --publish-ports).
  PublishOptions publish;
  // How often running containers with a readiness probe are probed, and each probe's deadline.
  std::chrono::milliseconds readiness_interval{2000};
  std::chrono::milliseconds readiness_timeout{1000};
  // MIG by demand (mig_demand.h): what changes this host's MIG instances; null: the instances
  // are the operator's (tessera mig apply).
  std::shared_ptr<MigShaper> mig_shaper;
};

// Who is calling: the admin, or one tenancy's token.
struct Caller {
  bool admin = false;
  std::string tenancy;      // when !admin
  std::string tenancy_uid;  // the incarnation of `tenancy` its token was made for
  // The token's public ID ("t-…"; "admin" for the admin token) and what it may do: records and
  // rate limits name it, never its secret.
  std::string token_id;
  fleet::TokenScope scope = fleet::TokenScope::kTenant;
  // The API request it makes (X-Request-Id), for the audit trail; set by the API edge.
  std::string request_id;

  // A tenant sees only its own incarnation: a tenancy deleted and created again under the same
  // name is someone else's. The admin sees everything, history included.
  bool Sees(const fleet::Tenancy& record) const {
    return admin || (record.name == tenancy && record.uid == tenancy_uid);
  }
  bool Sees(const fleet::ContainerRecord& record) const {
    return admin || (!tenancy_uid.empty() && record.tenancy_uid == tenancy_uid);
  }
};

struct SubmitResult {
  fleet::ContainerRecord container;
  bool replayed = false;  // an earlier submission with the same Idempotency-Key
};

// One page of GET /v1/containers: containers in creation order (or newest first), optionally
// filtered; `after` is the last ID of the previous page. Pages keep a listing's memory bounded
// however many containers the store holds.
struct ContainerQuery {
  static constexpr size_t kDefaultLimit = 500;
  static constexpr size_t kMaxLimit = 1000;
  // A page also ends once its rendered JSON would pass this many bytes (estimated), so a few
  // large records cannot make one answer of tens of MiB; it holds at least one record.
  static constexpr size_t kMaxPageBytes = 4u << 20;
  size_t limit = kDefaultLimit;
  size_t max_bytes = kMaxPageBytes;
  std::string after;
  bool newest_first = false;
  std::vector<fleet::ContainerState> states;  // empty: every state
  std::string tenancy;                        // empty: every tenancy the caller sees
};

struct ContainerPage {
  std::vector<fleet::ContainerRecord> containers;
  std::string next;  // the `after` of the next page; empty on the last page
};

// POST /v1/tenancies/{name}/tokens, POST /v1/tokens: {scope?, expiresInSeconds?}.
struct TokenRequest {
  static constexpr int64_t kMaxExpiresInSeconds = int64_t{10} * 366 * 86400;
  fleet::TokenScope scope = fleet::TokenScope::kTenant;
  int64_t expires_in_s = 0;  // 0: never expires
};

struct CreatedToken {
  fleet::TokenRecord record;
  std::string secret;  // shown once
};

enum class GpuAction { kDrain, kUndrain, kQuarantine, kRelease };
Result<GpuAction> ParseGpuAction(std::string_view name);

struct Counts {
  std::array<int64_t, fleet::kLeaseStateCount> gpus{};
  std::array<int64_t, 4> containers{};
  fleet::StoreStats store;
  std::optional<std::string> store_write_failure;  // why the store cannot write now
  uint64_t scheduling_passes = 0;                  // passes of the scheduling policy run
  uint64_t queue_reports = 0;                      // positions and reasons worked out for readers
  // Bucket bounds (s), cumulative counts per bound then +Inf, count, sum.
  struct Waits {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative;  // bounds.size() + 1
    uint64_t count = 0;
    double sum = 0;
  };
  // The tenancies that exist (their current incarnation only: an ended one is left out).
  struct Tenancy {
    std::string name;
    std::string uid;
    double gpu_seconds = 0;  // ended + running
    std::optional<Waits> queue_waits;
  };
  std::vector<Tenancy> tenancies;
};

// GET /v1/tenancies/{name}/usage?from=&to=&step=: GPU-seconds in [from, to) (Unix seconds),
// and with a step, per bucket of that many seconds (the dashboard's chart).
struct UsageQuery {
  static constexpr int64_t kMinStep = 60;
  static constexpr int64_t kMaxStep = 86400;
  static constexpr size_t kMaxBuckets = 1440;
  int64_t from_s = 0;
  std::optional<int64_t> to_s;  // unset: now
  int64_t step_s = 0;           // 0: no series
};
// One bucket of the series: [start_ms, start_ms + step).
struct UsageBucket {
  int64_t start_ms = 0;
  double gpu_seconds = 0;
  fleet::MeasuredUsage measured;  // each container's measured use spread evenly over its run
};
struct ContainerUsage {
  std::string id;
  double gpus = 0;  // GPU equivalents (MIG slices by their share)
  int64_t started_ms = 0;
  int64_t finished_ms = 0;  // 0: still running
  double gpu_seconds = 0;   // within the window
  // Measured use within the window: the container's measured figures taken as even over its run
  // (running: what was measured until now); unset when telemetry never measured it.
  std::optional<fleet::MeasuredUsage> measured;
};
struct UsageReport {
  static constexpr size_t kMaxContainers = 1000;
  std::string tenancy;
  int64_t from_ms = 0, to_ms = 0;
  double gpu_seconds = 0;  // every container of the tenancy within the window
  // The same, measured, over the containers telemetry measured (see ContainerUsage); unset when
  // it measured none.
  std::optional<fleet::MeasuredUsage> measured;
  // The containers that count, latest ended first (running ones first of all), at most
  // kMaxContainers; containers_total says how many there are.
  std::vector<ContainerUsage> containers;
  size_t containers_total = 0;
  std::vector<UsageBucket> series;  // with a step: the window's buckets, oldest first
};

// GET /v1/queue: the pending GPU containers in dispatch order after the last scheduling pass, and
// each tenancy's share of the fleet's GPUs next to its weight.
struct QueueEntry {
  std::string id;
  std::string tenancy;
  std::string tenancy_uid;
  int gpus = 0;
  fleet::MigRequest mig;                // a MIG request instead of gpus
  std::optional<sharing::Share> share;  // a share of one GPU instead of gpus
  int priority = 0;
  int position = 0;  // 1-based, over the whole queue (a tenant sees its own entries only)
  std::string reason;
  // When it waits for GPUs reserved for another request: that request's tenancy incarnation. A
  // caller who cannot see it is told only that they are reserved for another tenancy's request.
  std::string reserved_for_uid;
  int64_t created_ms = 0;
};
// What a reader of the queue is told about a reservation of a tenancy it cannot see.
inline constexpr const char* kReservedForAnother =
    "waiting: reserved for another tenancy's request";
struct TenancyShare {
  std::string name;
  scheduling::TenancyPolicy policy;
  int gpus_in_use = 0;
  double mig_gpus_in_use = 0;  // its running MIG slices, by their share of a GPU
  int pending = 0;
  double share = 0;   // of the fleet's recent GPU usage (half-life decayed), 0..1
  double target = 0;  // weight / weights of the tenancies with work, 0..1
};
struct QueueView {
  static constexpr size_t kMaxEntries = 1000;
  std::string mode;                 // "fair" or "fifo"
  std::vector<QueueEntry> entries;  // the first kMaxEntries the caller sees
  size_t total = 0;                 // how many the caller sees
  std::vector<TenancyShare> tenancies;
};

// One node of the fleet as it publishes itself (fleet mode).
struct NodeInventory {
  std::string name;
  std::vector<fleet::GpuRecord> gpus;  // topology order: pci_address, model, cdi_device
  topology::GpuTopology topology;      // the same GPUs, the same order
  std::optional<topology::PartitionTable> partition_table;  // with this node's PCI addresses
};

template <typename T>
using Done = std::function<void(Result<T>)>;

}  // namespace tessera::serve

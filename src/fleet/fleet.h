// The fleet's records: tenancies, containers and their specs, GPU leases with their state
// machine, API tokens, and the durable store that keeps them (SQLite, WAL, schema migrations,
// group commit). Knows nothing of HTTP or of how containers run (see backends/backend.h).
//
// Every record is a plain value. The service keeps the live model in memory and hands each
// changed record to Store::Commit; a change is acknowledged to a client only after the store
// reports its group durable.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/error.h"
#include "health/health.h"
#include "sharing/sharing.h"
#include "tenancy/tenancy.h"

namespace tessera::fleet {

// ---------------------------------------------------------------------------------------------
// Tenancies.

// A tenancy owns containers and tokens. Other components attach entitlements (networks, NFS
// volumes) under `extensions`: key -> JSON document, stored as is, so the record grows without
// a schema change here.
struct Tenancy {
  std::string name;
  int64_t created_ms = 0;  // Unix time, milliseconds
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> extensions;  // key -> JSON text
  // This incarnation of the name: random, new each time the name is created. Containers and
  // tokens belong to an incarnation, so deleting a tenancy and creating its name again hands the
  // new owner nothing of the old one's.
  std::string uid;

  friend bool operator==(const Tenancy&, const Tenancy&) = default;
};

// Tenancy names are DNS labels (RFC 1123, as Kubernetes namespaces): 1..63 characters of
// [a-z0-9-], starting and ending with a letter or digit. Returns the problem, or "" when valid.
std::string CheckTenancyName(std::string_view name);

// Image references tenants may submit: registry references only ("busybox",
// "registry.example:5000/team/app:1.2@sha256:…"), never a containers-transports reference such as
// "docker-archive:/path" or "oci:dir" (podman opens those paths as root). Returns the problem, or
// "" when valid. See image_reference.cc for the grammar.
inline constexpr size_t kMaxImageReference = 512;
std::string CheckImageReference(std::string_view reference);

// ---------------------------------------------------------------------------------------------
// Containers.

enum class Isolation {
  kRunc,    // shared kernel, runc
  kGvisor,  // gVisor (runsc), nvproxy for GPUs
  kKata,    // Kata Containers VM, GPUs through VFIO
};
const char* IsolationName(Isolation isolation);  // "runc", "gvisor", "kata"
Result<Isolation> ParseIsolation(std::string_view name);

enum class ContainerState {
  kPending,  // accepted; waiting for GPUs or for the backend to start it
  kRunning,  // the backend started it
  kExited,   // ran and ended; exit_code is set
  kFailed,   // could not run, or vanished (reason says which)
};
const char* ContainerStateName(ContainerState state);  // "pending", "running", ...
Result<ContainerState> ParseContainerState(std::string_view name);
inline bool IsTerminal(ContainerState state) {
  return state == ContainerState::kExited || state == ContainerState::kFailed;
}

inline constexpr int kMaxGpusPerContainer = 8;
inline constexpr int kMaxMigSlicesPerContainer = 56;  // 8 GPUs x 7 slices
inline constexpr size_t kMaxMigProfileLength = 32;

// MIG slices of one profile instead of whole GPUs (runc only): free MIG devices of GPUs that are
// already in MIG mode (`tessera mig apply` sets layouts; the service never changes them).
struct MigRequest {
  std::string profile;  // "1g.10gb", as inventory reports it
  int count = 0;        // 0: none; else 1..kMaxMigSlicesPerContainer
  friend bool operator==(const MigRequest&, const MigRequest&) = default;
};
// "" when `profile` has the shape of a MIG profile name ("1g.10gb", "1g.10gb+me",
// "1c.3g.40gb"), else what is wrong with it.
std::string CheckMigProfileName(std::string_view profile);

// A port a container serves on, to be published (POST /v1/containers `ports`).
inline constexpr size_t kMaxPortsPerContainer = 16;
struct PortRequest {
  int container_port = 0;        // 1..65535, unique per protocol within a container
  std::string name;              // optional, DNS-1123 label of at most 15 characters (a Service's)
  std::string protocol = "tcp";  // tcp or udp
  friend bool operator==(const PortRequest&, const PortRequest&) = default;
};
// Where a published port is reached: the host's address and port (embedded: the operator's
// --publish-address and a port of --publish-ports), or the Service's (Kubernetes).
struct PublishedPort {
  int container_port = 0;
  std::string protocol = "tcp";
  std::string name;
  std::string host_address;  // empty until known (a LoadBalancer's address comes later)
  int host_port = 0;         // 0 until known
  friend bool operator==(const PublishedPort&, const PublishedPort&) = default;
};
// `ready: {httpGet: {path, port}}`: the container counts as ready once an HTTP GET of `path` on
// `port` (one of its ports) answers 200..399.
struct ReadinessProbe {
  std::string path = "/";  // starts with '/', printable, at most 256 bytes
  int port = 0;            // a container port of `ports`
  friend bool operator==(const ReadinessProbe&, const ReadinessProbe&) = default;
};

// What a client asks for (POST /v1/containers).
struct ContainerSpec {
  std::string image;
  std::string tenancy;
  int gpus = 0;  // 0..kMaxGpusPerContainer; 0 when `mig` asks for slices
  Isolation isolation = Isolation::kRunc;
  std::vector<std::string> command;        // empty: the image's default
  std::map<std::string, std::string> env;  // NAME -> value
  // Its tenancy's network (default) or none; NFS exports its tenancy is entitled to.
  tenancy::NetworkMode network = tenancy::NetworkMode::kTenancy;
  std::vector<tenancy::VolumeRequest> volumes;
  // Scheduling (GPU containers): order inside its tenancy, bounded by the tenancy's maximum; a
  // limit after which the service stops it (0: none); whether it may be stopped for others.
  int priority = 0;
  int64_t max_duration_s = 0;
  bool preemptible = false;
  MigRequest mig;  // slices instead of `gpus`
  // A share of one GPU (MPS or time-slicing) instead of `gpus` or `mig` (runc only).
  std::optional<sharing::Share> share;
  // Ports to publish (needs the tenancy network), and when it counts as ready.
  std::vector<PortRequest> ports;
  std::optional<ReadinessProbe> ready;

  friend bool operator==(const ContainerSpec&, const ContainerSpec&) = default;
};

// What a container's GPU processes were measured to use (GPU telemetry): SM-seconds (a whole
// GPU's SMs busy for one second is 1), GPU memory GiB-seconds, and joules (the GPU's energy: the
// busy part by SM share, the idle part by allocation).
struct MeasuredUsage {
  double sm_seconds = 0;
  double memory_gib_seconds = 0;
  double energy_joules = 0;
  MeasuredUsage& operator+=(const MeasuredUsage& other) {
    sm_seconds += other.sm_seconds;
    memory_gib_seconds += other.memory_gib_seconds;
    energy_joules += other.energy_joules;
    return *this;
  }
  bool empty() const { return sm_seconds == 0 && memory_gib_seconds == 0 && energy_joules == 0; }
  friend bool operator==(const MeasuredUsage&, const MeasuredUsage&) = default;
};

struct ContainerRecord;
// What a container holds in GPU equivalents: its whole GPUs, or its MIG slices' share.
double GpuEquivalents(const ContainerRecord& container);

struct ContainerRecord {
  std::string id;  // "c-" + 16 hex digits
  ContainerSpec spec;
  std::string tenancy_uid;  // the incarnation of spec.tenancy it belongs to; "": none
  ContainerState state = ContainerState::kPending;
  std::vector<std::string> gpus;  // IDs (GpuRecord::id) of the GPUs it holds (or held)
  // A MIG request: the MIG devices it holds (or held) (MigSlice::id), their parents in `gpus`,
  // and what they are metered as: the sum of their compute slices over their boards'.
  std::vector<std::string> mig_devices;
  double mig_gpus = 0;
  // A share: its GPU (in `gpus`), what it is metered as (its fraction of that GPU,
  // sharing::Fraction), and what held its limits (sharing::EnforcementName; MIG slices are
  // "hardware"), as they were when it was placed.
  double share_gpus = 0;
  std::string enforcement;
  std::optional<int> exit_code;
  std::string reason;           // why failed / stopped; empty otherwise
  std::string idempotency_key;  // the client's Idempotency-Key, scoped by tenancy
  bool stop_requested = false;  // DELETE seen; the backend is stopping it
  bool started = false;         // the backend was asked to start it
  int64_t created_ms = 0;
  int64_t started_ms = 0;
  int64_t finished_ms = 0;
  // A pending GPU container's place in dispatch order after the last scheduling pass (1 is
  // next), with `reason` saying why it waits; 0 otherwise. Not stored: the service fills both
  // into the copies it hands out.
  int queue_position = 0;
  // What it measured so far while running (written with every telemetry pass that changed it, in
  // the transaction that advances the GPUs' cursors; see TelemetryCursor). Unset: no telemetry
  // ever saw it (telemetry off, or never on a measured GPU).
  std::optional<MeasuredUsage> measured;
  // Its ports as published (one per spec.ports entry, same order; the host side filled in once
  // known), and whether its readiness probe answers (a spec without `ready`: never set).
  std::vector<PublishedPort> published;
  std::optional<bool> ready;

  friend bool operator==(const ContainerRecord&, const ContainerRecord&) = default;
};

// The ID of a submission with an Idempotency-Key: derived from the tenancy's incarnation and the
// key, so replicas that accept the same retried request at once name the same record (the
// cluster store's AlreadyExists keeps the key unique per tenancy). "c-" + 16 hex digits, as a
// random ID. Once retention removed a keyed record, its ID is retired (ContainerDeletion's
// tombstone) and the key's next submission takes the next `generation`: an ID names one run,
// ever, so nothing metered under it can be mistaken for another run's.
std::string IdempotentContainerId(const std::string& tenancy_uid, const std::string& key,
                                  uint32_t generation = 0);

// Two copies of one container record written by different replicas, merged: a stop request
// seen by either stays; the status (state, GPUs, times, exit) is the one further along
// (pending < running < exited/failed; started before not started), `ours` on a tie; the measured
// use the larger of each figure. The spec and identity are `ours`.
ContainerRecord MergeContainerRecords(const ContainerRecord& ours, const ContainerRecord& theirs);

// ---------------------------------------------------------------------------------------------
// GPU leases.
//
//   free -> reserved (placed) -> active (container running) -> releasing (container ended)
//        -> checking (firmware check) -> free | quarantined
//   draining: taken out of service by an operator; a leased GPU finishes its lease first and
//   then goes to draining instead of free.
//   faulted: a GPU fault took it out at once, from any state (docs/faults.md); its health record
//   says the recovery step. Recovery hands it back to the lease flow (releasing, the firmware
//   check) once reset and verified; an operator's release frees one that stays out.
//   A GPU that is not free is never placed.
enum class LeaseState {
  kFree,
  kReserved,
  kActive,
  kReleasing,
  kChecking,
  kQuarantined,
  kDraining,
  kFaulted,
};
const char* LeaseStateName(LeaseState state);  // "free", "reserved", ...
Result<LeaseState> ParseLeaseState(std::string_view name);
inline constexpr int kLeaseStateCount = 8;

// Whether the state machine allows `from` -> `to` (operator moves included). FailedPrecondition
// naming both states otherwise.
Status CheckLeaseTransition(LeaseState from, LeaseState to);

// A GPU's health as its records keep it (the store's document, the cluster store's ConfigMap):
// a JSON object that reads back equal. Reading is bounded (kMaxHistory entries, reasons of
// 1024 bytes) and strict about types; InvalidArgument naming the field.
std::string GpuHealthToJson(const health::GpuHealth& health);
Result<health::GpuHealth> ParseGpuHealthJson(std::string_view text);

// One MIG device of a GPU in MIG mode, as this host's inventory lists it (not stored: the layout
// is read at start), and who holds it (derived from the container records that name it).
struct MigSlice {
  std::string id;       // its UUID ("MIG-…"), else "<PCI address>/gi<G>/ci<C>"
  std::string profile;  // "1g.10gb"; empty when NVML could not be asked (never placed)
  uint32_t compute_slices = 0;
  std::string cdi_device;    // fully qualified CDI name, e.g. "nvidia.com/gpu=MIG-…"
  std::string container_id;  // holder; empty when free
  std::string tenancy;       // holder's tenancy
  // Its GPU instance (NVML's GI ID): a fault contained to one instance names it.
  uint32_t gpu_instance_id = health::kWholeGpu;
  // Its memory as NVML reports it (0: not known; a share counts the profile's name then).
  uint64_t memory_bytes = 0;
  // Held by shares (ShareHolder::mig_device names it): `container_id` is then one of them, and
  // the slice is never handed out whole until the last one leaves.
  bool shared = false;
  // Why the MPS daemon of a shared slice failed (no new shares there until it is back).
  std::string share_fault;
  friend bool operator==(const MigSlice&, const MigSlice&) = default;
};

// One share a GPU holds (derived from the container records that name it, like MIG slices).
struct ShareHolder {
  std::string container_id;
  std::string tenancy;
  std::string tenancy_uid;
  sharing::Share share;
  std::string mig_device;  // a share of a MIG slice: the slice's MigSlice::id; else empty
  friend bool operator==(const ShareHolder&, const ShareHolder&) = default;
};

struct GpuRecord {
  // The node it is on: "" for this host (embedded mode), else the Kubernetes node's name. A GPU
  // is identified by (node, PCI address); see id().
  std::string node;
  std::string pci_address;  // "0000:18:00.0": the ID in the lease file of its node
  int index = 0;            // PCI order on its host (NVML numbering)
  std::string model;
  std::string cdi_device;  // fully qualified CDI name, e.g. "nvidia.com/gpu=GPU-…"
  LeaseState state = LeaseState::kFree;
  std::string reason;                 // why quarantined / draining / last check result
  std::string tenancy;                // holder while leased
  std::string container_id;           // holder while leased
  bool drain_requested = false;       // go to draining instead of free when the lease ends
  bool quarantine_requested = false;  // go to quarantined when the lease ends
  std::string firmware_baseline;      // "sha256:<hex>" of the option ROM when first seen, or
                                      // "absent" when the device exposes none
  int64_t updated_ms = 0;
  // Whether its node currently reports it (not stored). A GPU that vanished with its node is
  // kept, with its lease, but never placed.
  bool available = true;
  // MIG mode (this host's inventory, not stored): handed out by slice only, never whole. Its
  // lease covers every slice: active while any is held, released and checked when the last one
  // is; `container_id` is then the last holder.
  bool mig_enabled = false;
  uint32_t compute_slices = 0;  // the board's (7 on A100 and H100)
  std::vector<MigSlice> mig_slices;
  // Sharing (this host's NVML, not stored): the board's memory (0: unknown, never shared), the
  // shares it holds (its lease covers them all, as for MIG slices), and why its MPS daemon
  // failed (no new shares until it is back).
  uint64_t memory_bytes = 0;
  std::vector<ShareHolder> shares;
  std::string share_fault;
  std::string uuid;  // NVML's "GPU-…" (this host's inventory, not stored): its MPS daemon's name
  // Faults and recovery (docs/faults.md): the recovery step, the fault that took it out and its
  // history. Stored; in fleet mode the node agent publishes it.
  health::GpuHealth health;

  // The ID in the API and in container records: the PCI address on this host,
  // "<PCI address>@<node>" on a node of the fleet ('@' is in neither).
  std::string id() const { return GpuId(node, pci_address); }
  static std::string GpuId(const std::string& node, const std::string& pci_address) {
    return node.empty() ? pci_address : pci_address + "@" + node;
  }
  bool leased() const {
    return state == LeaseState::kReserved || state == LeaseState::kActive ||
           state == LeaseState::kReleasing || state == LeaseState::kChecking;
  }
  bool HasMigHolders() const {
    for (const auto& slice : mig_slices)
      if (!slice.container_id.empty()) return true;
    return false;
  }
  friend bool operator==(const GpuRecord&, const GpuRecord&) = default;
};

// ---------------------------------------------------------------------------------------------
// Tokens. Only the SHA-256 of a token is stored.

// What a token may do (docs/serve.md "Tokens"): the admin token everything; a tenancy's `tenant`
// token everything its tenancy may; `read-only` only its tenancy's GETs; `metrics` only
// GET /metrics (it belongs to no tenancy).
enum class TokenScope { kAdmin, kTenant, kReadOnly, kMetrics };
const char* TokenScopeName(TokenScope scope);  // "admin", "tenant", "read-only", "metrics"
Result<TokenScope> ParseTokenScope(std::string_view name);

struct TokenRecord {
  std::string id;       // short public handle ("t-" + 8 hex), for listing and revoking
  std::string sha256;   // hex digest of the secret
  std::string tenancy;  // the tenancy it may act for ("" for the metrics scope)
  int64_t created_ms = 0;
  std::string tenancy_uid;  // the incarnation of `tenancy` it was made for
  TokenScope scope = TokenScope::kTenant;
  int64_t expires_ms = 0;  // refused from this moment on (Unix ms); 0: never
  // When it was last accepted, as last written: the service keeps the exact time in memory and
  // writes it at most once a minute per token, never once per request.
  int64_t last_used_ms = 0;

  friend bool operator==(const TokenRecord&, const TokenRecord&) = default;
};

// Hex SHA-256 of `data` (OpenSSL).
std::string Sha256Hex(std::string_view data);
// `bytes` random bytes from the kernel, hex encoded.
Result<std::string> RandomHex(int bytes);

// ---------------------------------------------------------------------------------------------
// The durable store.

// Deletes a tenancy and its tokens. Its container records stay, as history.
struct TenancyDeletion {
  std::string name;
  friend bool operator==(const TenancyDeletion&, const TenancyDeletion&) = default;
};

// Revokes one token: its record is deleted (the audit trail keeps who revoked it).
struct TokenDeletion {
  std::string id;
  friend bool operator==(const TokenDeletion&, const TokenDeletion&) = default;
};

// Deletes a container record (retention of finished ones). With `tombstone` its ID is retired
// for good: kept in the store so that no later submission is given it (see
// IdempotentContainerId).
struct ContainerDeletion {
  std::string id;
  bool tombstone = false;
  friend bool operator==(const ContainerDeletion&, const ContainerDeletion&) = default;
};

// Metered GPU time of one run of a container (billing): inserted once, in the commit that ends it
// and releases its GPUs, and never changed or replaced. A run is (container_id, started_ms): a
// second record of the same run is the same record written again (a retry) and is dropped. It
// outlives the container record (retention) and its tenancy.
// GPU-seconds = gpus * (finished_ms - started_ms) / 1000.
//
// Next to that allocation, what the run's processes were measured to use (GPU telemetry): an
// optional field here and nullable columns of the store's `usage` table (NULL: not measured),
// taken from the container record in the same commit, so it is never written afterwards.
struct UsageRecord {
  std::string container_id;
  std::string tenancy;
  std::string tenancy_uid;
  double gpus = 0;          // GPU equivalents: whole GPUs, or MIG slices by their share of the GPU
  int64_t started_ms = 0;   // its GPUs became the running container's
  int64_t finished_ms = 0;  // the container ended (as its runtime reports) and its GPUs went to
                            // their release
  std::optional<MeasuredUsage> measured;  // unset: not measured
  std::string gpu_model;  // its GPUs' model, and how it held them ("gpu", "mig"): the labels of
  std::string mode;       // the per-tenancy series

  friend bool operator==(const UsageRecord&, const UsageRecord&) = default;
};

// Where GPU telemetry last counted on one GPU of this host: the newest per-process sample and the
// energy counter it took, and when. Committed with the measured use it produced, so a restarted
// service counts neither a sample nor a joule twice.
struct TelemetryCursor {
  std::string gpu;  // PCI address
  uint64_t sample_us = 0;
  uint64_t energy_mj = 0;
  int64_t sampled_ms = 0;
  friend bool operator==(const TelemetryCursor&, const TelemetryCursor&) = default;
};

// One entry of the audit trail: who changed what, when, and how it ended. Inserted in the
// transaction of the change it records (a refused request's alone), never changed afterwards;
// only retention deletes it (Store::ExpireAudit). Never holds a token's secret or its hash.
struct AuditRecord {
  int64_t time_ms = 0;
  std::string token_id;     // the caller's token ID; "admin"; "service" for its own actions
  std::string scope;        // "admin", "tenant", "service"
  std::string action;       // "container.create", "gpu.drain", ...
  std::string object_kind;  // "container", "tenancy", "token", "storage", "gpu"
  std::string object_id;    // its ID or name
  std::string tenancy;      // the tenancy it concerns; "" when none
  std::string result;       // "ok", or the error's category ("permission_denied", ...)
  std::string request_id;   // the API request's X-Request-Id; "" for the service's own actions
  std::string detail;       // a short why (an exit code, a stop's reason); bounded

  friend bool operator==(const AuditRecord&, const AuditRecord&) = default;
};
inline constexpr size_t kMaxAuditDetail = 256;

// One page of the audit trail, oldest first: records after `after` (a record's sequence number;
// 0: from the start), optionally only one tenancy's or action's, and only those with from_ms <=
// time_ms < to_ms.
struct AuditQuery {
  static constexpr size_t kDefaultLimit = 100;
  static constexpr size_t kMaxLimit = 1000;
  size_t limit = kDefaultLimit;
  int64_t after = 0;
  std::string tenancy;
  std::string action;
  std::optional<int64_t> from_ms;
  std::optional<int64_t> to_ms;
};
struct AuditEntry {
  int64_t seq = 0;  // increasing, never reused
  AuditRecord record;
};
struct AuditPage {
  std::vector<AuditEntry> entries;
  int64_t next = 0;  // the `after` of the next page; 0 on the last page
};

// One changed record; Commit upserts it (a ContainerRecord with the same id replaces the old),
// or deletes it (TenancyDeletion, ContainerDeletion, TokenDeletion). A UsageRecord is inserted,
// never replaced. A TelemetryCursor replaces its GPU's. An AuditRecord is appended.
using Mutation =
    std::variant<Tenancy, ContainerRecord, GpuRecord, TokenRecord, TenancyDeletion,
                 ContainerDeletion, UsageRecord, TelemetryCursor, TokenDeletion, AuditRecord>;

struct StoreSnapshot {
  std::vector<Tenancy> tenancies;
  std::vector<ContainerRecord> containers;  // by creation order
  std::vector<GpuRecord> gpus;              // by index
  std::vector<TokenRecord> tokens;
  std::vector<UsageRecord> usage;        // by finished_ms
  std::vector<std::string> retired_ids;  // container IDs never to be given again
  // GPU ID -> the firmware baseline recorded for it, kept apart from the GPU's lease record: a
  // GPU whose baseline is here but whose record is not lost its record (never a new GPU).
  std::map<std::string, std::string> firmware_baselines;
  std::vector<TelemetryCursor> cursors;  // this host's GPUs' telemetry cursors
};

struct StoreStats {
  uint64_t groups = 0;     // transactions committed
  uint64_t mutations = 0;  // records written
  uint64_t largest_group = 0;
  uint64_t checkpoints = 0;          // background WAL checkpoints run
  uint64_t checkpointed_frames = 0;  // WAL frames they copied into the database
};

class Store {
 public:
  virtual ~Store() = default;

  // Everything in the store, for start-up.
  virtual Result<StoreSnapshot> Load() = 0;

  // Queues `mutations` to be written in one transaction together with whatever else is queued
  // (group commit). `done` runs on the store's writer thread once that transaction is durable,
  // or with the error when it failed; an empty list is a barrier (done runs after everything
  // queued before it is durable). Commit calls from one thread keep their order.
  virtual void Commit(std::vector<Mutation> mutations, std::function<void(Status)> done) = 0;

  // Commit and wait.
  Status CommitAndWait(std::vector<Mutation> mutations);

  virtual StoreStats stats() const = 0;

  // Why the store cannot write now (disk full, an I/O error, a damaged file), from the last
  // transaction that failed so, until one succeeds again; nullopt while writes succeed. The
  // service refuses changes meanwhile and keeps what it could not write to retry.
  virtual std::optional<std::string> WriteFailure() const { return std::nullopt; }

  // The audit trail is never loaded (Load leaves it out): it is read a page at a time, beside
  // the writer. A store that keeps none answers FailedPrecondition.
  virtual Result<AuditPage> QueryAudit(const AuditQuery& query) const;
  // Deletes at most `limit` audit records older than `before_ms`, oldest first, in one
  // transaction of their own; returns how many went (retention runs it in batches until fewer
  // than `limit` go, so the writer is never held long).
  virtual Result<size_t> ExpireAudit(int64_t before_ms, size_t limit);
};

struct StoreOptions {
  std::string path;              // the SQLite database file
  int max_group = 1024;          // most mutations in one transaction
  bool synchronous_full = true;  // PRAGMA synchronous=FULL: a commit survives power loss
  // Copy the WAL back into the database on a thread of its own (PASSIVE checkpoints on a second
  // connection) instead of inside whichever commit crosses the 1000-page mark; that commit
  // would otherwise wait for the copy and its fsync.
  bool background_checkpoint = true;
  // The service has run with this data before (its admin token exists): an empty database file
  // is a lost store, not a new one, and opening it is refused.
  bool refuse_empty = false;
};

// Opens (creating and migrating when needed) a SQLite store in WAL mode and starts its writer
// thread. The schema version is PRAGMA user_version; migrations run in order in one
// transaction each. A store is checked before it is trusted: PRAGMA quick_check at open, and
// every read to its last row; a damaged one is refused (FailedPrecondition naming the file, the
// first problems found and how to recover it).

Result<std::unique_ptr<Store>> OpenSqliteStore(const StoreOptions& options);
// The schema version this build writes.
int SchemaVersion();

// Milliseconds since the Unix epoch.
int64_t NowMs();

}  // namespace tessera::fleet

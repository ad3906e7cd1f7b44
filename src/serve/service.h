// The GPU container service: the live model (tenancies, containers, GPU leases, tokens) over the
// durable store, and the parts that work on it, one concern each:
//   access.h       tokens and who is calling
//   request_limits.h  how often callers may send requests
//   tenancies.h    tenancy records, storage entitlements, the backend's per-tenancy objects
//   submissions.h  containers as tenants submit, list and delete them
//   gpus.h         the fleet's nodes, GPU listing and the operator's actions
//   scheduler.h    placement, starts and stops, exits, retention       (leader only)
//   checker.h      the end of each lease: firmware checks               (leader only)
//   measurement.h  this host's GPU telemetry and what containers measured
//   fault_metrics.h  GPU faults and recoveries as /metrics shows them
//   faults.h       GPU faults: classified and contained as they arrive
//   recovery.h     faulted GPUs of this host: reset, verified, returned   (leader only)
// This class composes them behind the API the HTTP edge calls; it knows no HTTP.
//
// Threads: callers (the HTTP server) call in from any thread; the scheduler's thread places
// pending containers, with a bounded pool for the backend's starts and stops; the checker's thread
// runs firmware checks; the store's writer thread runs the `done` callbacks of mutating calls once
// their change is durable.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "backends/backend.h"
#include "common/error.h"
#include "fleet/fleet.h"
#include "serve/access.h"
#include "serve/audit.h"
#include "serve/checker.h"
#include "serve/dashboard.h"
#include "serve/fault_metrics.h"
#include "serve/faults.h"
#include "serve/gpus.h"
#include "serve/measurement.h"
#include "serve/mig_demand.h"
#include "serve/model.h"
#include "serve/readiness.h"
#include "serve/recovery.h"
#include "serve/replica_sync.h"
#include "serve/request_limits.h"
#include "serve/scheduler.h"
#include "serve/shared_gpus.h"
#include "serve/submissions.h"
#include "serve/tenancies.h"
#include "serve/types.h"
#include "topology/topology.h"

namespace tessera::serve {

class Service {
 public:
  // Reads nothing itself: the caller hands in the host's GPUs (from the inventory), the
  // topology for placement, the opened store and the backend. Loads the store, merges the
  // host's GPUs (recording firmware baselines of new ones), reconciles with the backend and
  // writes the lease file. Threads start in Start().
  struct Host {
    std::vector<fleet::GpuRecord> gpus;  // PCI order; state/baseline filled in by the service
    std::optional<topology::GpuTopology> topology;
  };
  using NodeInventory = serve::NodeInventory;
  static Result<std::unique_ptr<Service>> Create(
      ServiceOptions options, Host host, std::unique_ptr<fleet::Store> store,
      std::unique_ptr<backends::ContainerBackend> backend);
  ~Service();
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  // Starts the scheduler and checker threads (StartLeading).
  void Start();
  // The parts only the leading replica runs: placement with the lease flow (scheduler) and the
  // end of each lease (firmware checker). Stopping waits for the starts already under way.
  void StartLeading();
  void StopLeading();
  // Checked right before every placement: false stops placing at once (see Scheduler). Also
  // decides whose container status wins when another replica's record arrives.
  void SetLeadershipCheck(std::function<bool()> is_leader);
  // A record another replica wrote (options.resync set: the store is shared), applied to the
  // model. Any thread.
  void ApplyReplicated(const fleet::Mutation& change);
  // Fleet mode: the nodes that publish GPUs now (all of them, each call). New GPUs are added
  // (free); GPUs of nodes no longer listed, or no longer listed by their node, become unavailable
  // (never placed) but keep their records and leases.
  void UpdateNodes(std::vector<NodeInventory> nodes);
  // A fault this host's health monitor saw (any thread): the containers it reaches stop at once
  // and the GPU leaves the pool (docs/faults.md).
  void OnGpuSignal(const health::Signal& signal) { faults_.OnSignal(signal); }
  // Before Start: what recovery reads and runs on this host (without it, faulted GPUs stay
  // faulted until an operator releases them).
  void SetRecoveryIo(std::unique_ptr<RecoveryIo> io) { recovery_.SetIo(std::move(io)); }
  // A GPU reset runs: telemetry holds no NVML handle meanwhile (see Measurement::Suspend).
  void SuspendTelemetry() { measurement_.Suspend(); }
  void ResumeTelemetry() { measurement_.Resume(); }
  // Stops the threads, after the starts and stops already handed to the pool have returned;
  // running containers are left running (adopted on the next start).
  void Stop();

  // ---- Auth ----
  // Installs the admin token's hash (from the admin token file).
  void SetAdminTokenHash(std::string sha256);
  // PermissionDenied (401 at the edge) for an unknown, revoked or expired token.
  Result<Caller> Authenticate(std::string_view token);
  // Tokens (admin): list (every one, or a tenancy's), revoke one at once, rotate the admin
  // token (its file written first; the old token refused from the next request).
  Result<std::vector<fleet::TokenRecord>> ListTokens(const Caller& caller,
                                                     const std::string& tenancy) const;
  void RevokeToken(const Caller& caller, const std::string& id, Done<fleet::TokenRecord> done);
  Result<std::string> RotateAdminToken(const Caller& caller);
  // Request rate limits: nullopt to go ahead, else the Retry-After in whole seconds.
  std::optional<int> ChargeRequest(const Caller& caller) { return limits_.Charge(caller); }
  std::optional<int> ChargeAnonymousRequest(std::string_view address) {
    return limits_.ChargeAnonymous(address);
  }
  RateLimit RateLimitFor(const fleet::Tenancy& tenancy);

  // ---- Audit trail (docs/audit.md) ----
  // The record of a request refused before it changed anything (`result`: AuditResult), in a
  // commit of its own; `then` runs once that commit has ended, durable or not.
  void RecordRefusal(const Caller& caller, AuditSubject subject, std::string result,
                     std::function<void()> then);
  // GET /v1/audit (admin only): one page, read from the store beside its writer.
  Result<fleet::AuditPage> Audit(const Caller& caller, const fleet::AuditQuery& query) const;

  // ---- Tenancies ----
  void PutTenancy(const Caller& caller, fleet::Tenancy tenancy, Done<fleet::Tenancy> done);
  Result<fleet::Tenancy> GetTenancy(const Caller& caller, const std::string& name) const;
  std::vector<fleet::Tenancy> ListTenancies(const Caller& caller) const;
  // `tenancy` empty: a metrics token.
  void CreateToken(const Caller& caller, const std::string& tenancy, const TokenRequest& request,
                   Done<CreatedToken> done);
  // Storage entitlements (admin only to set; the tenancy's own token may read). Setting them
  // creates the tenancy when missing, like PutTenancy.
  void PutStorage(const Caller& caller, const std::string& tenancy,
                  tenancy::StorageEntitlements storage, Done<tenancy::StorageEntitlements> done);
  Result<tenancy::StorageEntitlements> GetStorage(const Caller& caller,
                                                  const std::string& tenancy) const;
  // GET /v1/tenancies/{name}/usage: metered GPU-seconds in a window (admin, or its own token).
  Result<UsageReport> Usage(const Caller& caller, const std::string& tenancy,
                            const UsageQuery& query) const;
  // Makes the backend's objects of a tenancy (network, NFS volumes) match its record. Blocks on
  // the backend: call it off the I/O thread.
  Status PrepareTenancy(const std::string& tenancy);
  // Deletes a tenancy (admin): refused (FailedPrecondition) while a container of it has not
  // ended; removes its ended containers from the backend, then its network and volumes, then
  // the record and its tokens (container records stay, as history). Blocks on the backend.
  Status DeleteTenancy(const Caller& caller, const std::string& tenancy);

  // ---- Containers ----
  void Submit(const Caller& caller, fleet::ContainerSpec spec, std::string idempotency_key,
              Done<SubmitResult> done);
  Result<fleet::ContainerRecord> GetContainer(const Caller& caller, const std::string& id) const;
  // InvalidArgument when `after` names no container the caller sees.
  Result<ContainerPage> ListContainers(const Caller& caller, const ContainerQuery& query) const;
  void DeleteContainer(const Caller& caller, const std::string& id,
                       Done<fleet::ContainerRecord> done);
  // What it printed after byte `offset` of its log (backends::LogPart). Blocks on the backend:
  // call it off the I/O thread.
  Result<backends::LogPart> LogsFrom(const Caller& caller, const std::string& id, uint64_t offset);
  // GET /v1/queue: pending GPU containers in dispatch order with why each waits, and each
  // tenancy's share next to its weight (a tenant: its own entries and tenancy).
  QueueView Queue(const Caller& caller) const;

  // ---- GPUs ----
  std::vector<fleet::GpuRecord> ListGpus(const Caller& caller) const;
  // GET /v1/gpus/{id}: one GPU as the listing shows it, with its fault history (health).
  Result<fleet::GpuRecord> GetGpu(const Caller& caller, const std::string& gpu_id) const;
  // `gpu_id` is GpuRecord::id(): the PCI address on this host, "<PCI>@<node>" in fleet mode.
  void GpuAdmin(const Caller& caller, const std::string& gpu_id, GpuAction action,
                std::string reason, Done<fleet::GpuRecord> done);

  // GET /v1/dashboard: every GPU the caller sees by node and partition, tenancies, counts, and
  // the latest telemetry pass's gauges.
  DashboardView Dashboard(const Caller& caller) const;
  // GPU telemetry of this host (embedded mode): the node's series and the per-tenancy series
  // for /metrics, the last pass for GET /v1/telemetry (a tenant: its own containers).
  void RenderTelemetryMetrics(std::string& out) const { measurement_.RenderMetrics(out); }
  std::string TelemetryJson(const Caller& caller) const { return measurement_.PassJson(caller); }
  // A telemetry pass now (tests, benchmarks).
  void MeasureNow() { measurement_.Pass(); }

  Counts counts() const;
  // GPU faults and recoveries (/metrics): the fault handling counts into it, the API renders it.
  FaultMetrics& fault_metrics() { return fault_metrics_; }
  const FaultMetrics& fault_metrics() const { return fault_metrics_; }
  // ServiceOptions::extra_metrics' series (empty when none).
  std::string ExtraMetrics() const;
  // Why the store cannot write now (changes are refused meanwhile); nullopt while it can.
  std::optional<std::string> StoreWriteFailure() const;
  // A tenancy's scheduling policy as it applies (the operator's default pending quota filled in
  // where its own policy sets none).
  scheduling::TenancyPolicy PolicyFor(const fleet::Tenancy& tenancy) const;
  const backends::ContainerBackend& backend() const { return *backend_; }

  // For tests and benchmarks: waits until nothing is pending, starting or being checked.
  bool WaitIdle(std::chrono::milliseconds timeout);
  // Whether the share watchdog runs (a measurement source is set): time-sliced shares are
  // enforced by it, or by nothing.
  bool WatchdogRuns() const { return static_cast<bool>(options_.sharing.measure); }

 private:
  Service(ServiceOptions options, std::unique_ptr<fleet::Store> store,
          std::unique_ptr<backends::ContainerBackend> backend);
  // Refuses work that would eat into the store's reserve (options_.store_reserve).
  Status CheckReserve() const;

  Status Load(Host host);
  // Load's steps, mu held. last_alive_ms_ moves on to each moment a record shows.
  void SeenAlive(int64_t ms);
  // Tenancies, tokens and retired IDs; returns the incarnations of the tenancies that exist.
  std::set<std::string> LoadTenanciesLocked(fleet::StoreSnapshot& snapshot);
  // The bills (and the queue's recent usage rebuilt from them) and the measurement cursors.
  void LoadUsageLocked(fleet::StoreSnapshot& snapshot);
  // Containers, pending ones back in their queues; keys of deleted incarnations are dropped.
  void LoadContainersLocked(std::vector<fleet::ContainerRecord>& containers,
                            const std::set<std::string>& incarnations);
  // The host's GPUs merged with their stored records (new ones get their firmware baseline),
  // each one's record in `mutations`; stored GPUs of nodes not yet heard from are kept.
  Status MergeHostGpusLocked(fleet::StoreSnapshot& snapshot,
                             std::vector<fleet::GpuRecord>& host_gpus,
                             std::vector<fleet::Mutation>& mutations);
  static Error MissingLeaseRecord(const fleet::GpuRecord& gpu, const std::string& baseline);
  void AddNewHostGpuLocked(fleet::GpuRecord& gpu);
  // mu held: the slices of GPUs in MIG mode, and the shares of shared GPUs, get their holders
  // from the container records.
  void AttachMigHoldersLocked();
  void AttachShareHoldersLocked();
  // A started share of a MIG slice holds its slice again (AttachShareHoldersLocked).
  void AttachSliceShareLocked(fleet::GpuRecord& gpu, const fleet::ContainerRecord& container);
  void Reconcile();
  // Reconcile's steps. The backend's containers by ID; false when it cannot list them.
  bool ListBackendContainers(std::map<std::string, backends::BackendContainer>& present);
  // Those that ended while the service was down get their end from the runtime's own record
  // (asked without the lock).
  void InspectEndedWhileDown(std::map<std::string, backends::BackendContainer>& present);
  // mu held: a started container that has not ended, as the backend lists it: finished, or
  // running (and to be watched: `to_watch` says whether it was started, not only created).
  void ReconcileContainerLocked(fleet::ContainerRecord& container,
                                const std::map<std::string, backends::BackendContainer>& present,
                                std::vector<std::pair<std::string, bool>>& to_watch,
                                std::vector<fleet::Mutation>& mutations);
  // mu held: GPUs whose lease outlived its container are released, and those releasing or
  // checking are checked again.
  void ReleaseStaleLeasesLocked(std::vector<fleet::Mutation>& mutations);
  // Watches (or resumes) the containers still running; one that cannot be is ended.
  void WatchReconciled(const std::vector<std::pair<std::string, bool>>& to_watch);

  ServiceOptions options_;
  int64_t last_alive_ms_ = 0;  // the latest moment the store shows the service ran (Load)
  std::unique_ptr<fleet::Store> store_;
  std::unique_ptr<backends::ContainerBackend> backend_;
  Model model_;
  Gpus gpus_;
  Access access_;
  RequestLimits limits_;
  Tenancies tenancies_;
  Submissions submissions_;
  SharedGpus shared_;
  Scheduler scheduler_;
  std::unique_ptr<MigDemand> mig_demand_;  // MIG by demand, when options.mig_shaper is set
  FirmwareChecker checker_;
  ReplicaSync replica_sync_;
  Measurement measurement_;
  Readiness readiness_;
  FaultMetrics fault_metrics_;
  Faults faults_;
  Recovery recovery_;
};

}  // namespace tessera::serve

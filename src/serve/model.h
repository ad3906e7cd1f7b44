// The service's live model: every record (tenancies, containers, GPUs and their leases, tokens)
// as the store holds it, the fleet's nodes as placement sees them, and the queues of work the
// leader-only parts (scheduler, firmware checker) take from. Every part of the service works on
// this one model under its one mutex, so a decision sees every other part's changes.
//
// The state changes every part shares live here: they keep the model's indices and counts
// consistent and return the mutations to commit, in order.
#pragma once

#include <array>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "backends/backend.h"
#include "common/error.h"
#include "fleet/fleet.h"
#include "placement/placement.h"
#include "serve/metering.h"
#include "serve/mig_demand_plan.h"
#include "serve/port_allocator.h"
#include "serve/share_billing.h"
#include "serve/types.h"
#include "topology/topology.h"

namespace tessera::serve {

class Model {
 public:
  Model(const ServiceOptions& options, fleet::Store& store)
      : options(options),
        store(store),
        ports(options.publish.low, options.publish.high),
        share_holds(!options.sharing.across_tenancies) {}
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ServiceOptions& options;
  fleet::Store& store;
  // Embedded mode: the host's placement chooser. Set before any thread starts; never changed.
  std::optional<topology::GpuChooser> chooser;

  // Guards every member below.
  mutable std::mutex mu;

  // ---- Records ----
  std::string admin_hash;
  std::map<std::string, fleet::Tenancy> tenancies;
  std::unordered_map<std::string, fleet::ContainerRecord> containers;
  std::vector<std::string> container_order;                    // creation order
  std::unordered_map<std::string, size_t> container_position;  // id -> index in container_order
  // Tenancy incarnation (uid) '\n' Idempotency-Key -> container ID.
  std::unordered_map<std::string, std::string> idempotency;
  // Host ports of published container ports (embedded mode): held from placement until the
  // container ended (port_publishing.h).
  PortAllocator ports;
  // Running containers with a readiness probe, or (fleet mode) with ports the backend publishes:
  // readiness.h asks about these.
  std::set<std::string> probed;
  // Container IDs retention removed with a tombstone: never given again.
  std::unordered_set<std::string> retired_ids;
  // Per incarnation: submissions accepted into the model whose commit is not yet durable. They
  // join the queue once it is (and are taken out again if it fails), and count against the
  // pending quota meanwhile.
  std::unordered_map<std::string, int> unconfirmed;
  // Embedded mode: PCI order = topology index. Fleet mode: in order of discovery; only appended.
  std::vector<fleet::GpuRecord> gpus;
  std::unordered_map<std::string, fleet::TokenRecord> tokens;  // sha256 -> token
  std::array<int64_t, 4> container_counts{};

  // ---- Fleet mode: the nodes that publish GPUs, and the placement model over those with a
  // chooser ----
  struct Node {
    std::string name;
    std::vector<size_t> gpus;  // indices into gpus, topology order
    std::optional<topology::GpuChooser> chooser;
    std::shared_ptr<const topology::PartitionPlanner> planner;  // partition mode
    std::vector<int> module_of;  // topology index -> module ID (partition mode)
  };
  std::vector<Node> nodes;
  std::optional<placement::Fleet> placement;  // node i = nodes[placement_nodes[i]]
  std::vector<size_t> placement_nodes;

  // ---- Work for the leader-only parts ----
  struct ExitEvent {
    std::string id;
    backends::ExitInfo info;
  };
  std::deque<std::string> pending;  // container IDs to place
  // MIG containers waiting for slices, in submission order (entries that started or ended
  // since are dropped by the next pass).
  std::deque<std::string> mig_pending;
  // By incarnation (the queue's tenancy key, QueueTenancy): the GPUs its running MIG slices and
  // shares make up (each by its fraction of a GPU), and its MIG requests waiting.
  std::map<std::string, double> mig_in_use;
  std::unordered_map<std::string, int> mig_waiting;
  // MIG by demand (mig_demand.h), when ServiceOptions::mig_shaper is set: GPUs (PCI addresses)
  // whose instances are being changed (no slice of theirs is placed meanwhile), the memory slices
  // kept for large requests (no slice in them is handed out), each GPU's instances with their
  // placements as NVML last reported them, what each waiting request waits for, and whether a
  // placement pass left MIG requests waiting since the last decision.
  std::set<std::string> mig_reshaping;
  std::vector<MigReservation> mig_reservations;
  std::map<std::string, std::vector<mig::LiveInstance>> mig_instances;
  std::map<std::string, std::string> mig_demand_notes;
  bool mig_demand_due = false;
  std::condition_variable mig_demand_wake;
  // Share containers waiting for room on a GPU, in submission order (as mig_pending).
  std::deque<std::string> share_pending;
  std::unordered_map<std::string, int> share_waiting;  // by incarnation: its share requests waiting
  // Embedded mode: GPU records (indices into gpus) the last scheduling pass reserved for waiting
  // whole-GPU requests; shares never take them (nor does a submitted share ask a pass for them).
  std::unordered_set<size_t> reserved_gpus;
  // Set by the service before any thread starts: a GPU's last share is gone (its MPS daemon torn
  // down, compute mode and time-slice put back). The checker runs it before the GPU's check; an
  // error quarantines the GPU.
  std::function<Status(const fleet::GpuRecord&)> unshare;
  // Set by the service before any thread starts: the firmware check of a GPU ended (mu held).
  // True when it was recovering from a fault and this decided what comes next (Faults).
  std::function<bool(fleet::GpuRecord&, bool passed, const std::string& reason,
                     std::vector<fleet::Mutation>& out)>
      firmware_checked;
  std::deque<ExitEvent> exits;
  std::deque<std::string> to_check;  // GPUs in releasing, by ID
  std::deque<std::string> to_stop;   // running containers a client deleted
  // Containers a GPU fault stopped, by ID: the fault's time, where their bill ends.
  std::unordered_map<std::string, int64_t> fault_ends;
  std::unordered_set<std::string> starting;  // containers whose backend Start has not returned
  // Exits reported before their container's Start returned; applied after it.
  std::unordered_map<std::string, backends::ExitInfo> early_exits;
  int busy = 0;  // starts, stops and checks under way outside the lock
  // An input of the scheduling pass changed (GPUs freed, a request that could start or reserve
  // arrived, a policy): one pass is due. However many changes come, one pass runs for them.
  bool reschedule = false;
  // The queue of GPU containers (scheduling policy): every pending GPU container, each tenancy's
  // policy, and what runs, for quotas and shares, keyed by tenancy incarnation (QueueTenancy).
  // Containers without GPUs never enter it (they start from `pending` at once). Set before any
  // thread starts.
  std::optional<scheduling::Scheduler> queue;
  // Bumped by every change of what the queue's positions and reasons depend on.
  uint64_t queue_version = 0;
  // Positions and reasons of the waiting GPU and MIG containers, worked out when someone reads
  // them (by the scheduler's report thread, off this lock), for queue_version `version`.
  struct QueueReport {
    uint64_t version = 0;
    std::vector<QueueEntry> entries;                // dispatch order
    std::unordered_map<std::string, size_t> index;  // container ID -> entries index
    // Tenancy incarnation -> its entries' indices, in order (a tenant's view of the queue).
    std::unordered_map<std::string, std::vector<size_t>> by_tenancy;
  };
  std::shared_ptr<const QueueReport> queue_report;
  bool report_wanted = false;  // a reader found the report older than the queue
  std::condition_variable report_wake;
  uint64_t passes = 0;   // scheduling passes run
  uint64_t reports = 0;  // queue reports worked out
  // Per-run usage, running totals and queue waits, per tenancy incarnation (locks itself).
  Meter meter;
  // Shared GPUs held whole by their tenancy (the fault-domain rule): what they are billed.
  ShareHolds share_holds;
  std::condition_variable scheduler_wake;
  std::condition_variable checker_wake;
  std::condition_variable recovery_wake;  // a GPU was faulted, or one it waits for emptied
  std::condition_variable idle;

  // ---- Writes the store could not make (it could not write), kept to write again ----
  // Records by identity (their current state is written), deletions and usage as they were.
  struct Unsaved {
    std::set<std::string> containers, gpus, tenancies, tokens;
    std::vector<fleet::Mutation> deletions;
    std::vector<fleet::UsageRecord> usage;
    // Audit records go with the changes they record, as they were.
    std::vector<fleet::AuditRecord> audit;
    // Telemetry cursors: written again as telemetry_cursors holds them then (never an older one
    // over a newer: the containers' measured use is written at its current state too).
    bool cursors = false;
    bool empty() const {
      return containers.empty() && gpus.empty() && tenancies.empty() && tokens.empty() &&
             deletions.empty() && usage.empty() && audit.empty() && !cursors;
    }
  };
  Unsaved unsaved;
  // This host's GPUs' telemetry cursors as the last telemetry pass left them, by PCI address:
  // they go with the running containers' measured use (see Measurement).
  std::map<std::string, fleet::TelemetryCursor> telemetry_cursors;

  // ---- State changes (mu held) ----
  fleet::GpuRecord* FindGpu(const std::string& gpu_id);
  void SetGpuState(fleet::GpuRecord& gpu, fleet::LeaseState state, std::string reason,
                   std::vector<fleet::Mutation>& out);
  void SetContainerState(fleet::ContainerRecord& container, fleet::ContainerState state);
  // Its reserved or active GPUs go to releasing and are queued for their check. A MIG container
  // gives back its slices; a parent is released (and checked) with its last slice.
  void ReleaseGpus(fleet::ContainerRecord& container, std::vector<fleet::Mutation>& out);
  // A pending MIG container joins the MIG requests waiting for slices; it leaves once placed or
  // ended (MigLeftWaiting).
  void EnqueueMig(const fleet::ContainerRecord& container);
  void MigLeftWaiting(const fleet::ContainerRecord& container);
  // MIG containers of `tenancy` waiting for slices.
  int MigPendingOf(const std::string& tenancy) const;
  // A tenancy's MIG slices or shares in use changed by `gpus` (their fraction of a GPU): the
  // queue counts them in its share and against its GPU quota.
  void AddMigUse(const std::string& tenancy, double gpus);
  // A pending share container waits for room beside the queue; it leaves once placed or ended.
  void EnqueueShare(const fleet::ContainerRecord& container);
  void ShareLeftWaiting(const fleet::ContainerRecord& container);
  int SharePendingOf(const std::string& tenancy) const;
  // A stop the service decides (duration limit, preemption, watchdog, a shared GPU's fault): the
  // reason is the container's once it ends.
  void StopContainer(fleet::ContainerRecord& container, std::string reason,
                     std::vector<fleet::Mutation>& out);
  // Ends it as `info` says; its usage is metered up to the end the runtime reports (never
  // later than now), nothing when the runtime says it never started. The end goes into the
  // audit trail as the service's (container.exit / container.fail) unless `audited` is false:
  // a caller's request that ends it carries its own record.
  void FinishContainer(fleet::ContainerRecord& container, const backends::ExitInfo& info,
                       std::vector<fleet::Mutation>& out, bool audited = true);
  // A container now runs with GPUs (or slices) from its started_ms: metered from there.
  void MeterStarted(const fleet::ContainerRecord& container);
  // A share container now runs: where its tenancy pays the whole GPU, the GPU's billing follows
  // (ShareHolds::Started).
  void ShareStarted(const fleet::ContainerRecord& container, std::vector<fleet::Mutation>& out);
  // A new record, at the end of the listing order, its key indexed.
  void AddContainer(fleet::ContainerRecord container);
  // A placed container that has not ended holds its published host ports again (AddContainer).
  void HoldPortsOf(const fleet::ContainerRecord& container);
  // Whether readiness.h asks about it while it runs (see `probed`).
  bool Probed(const fleet::ContainerRecord& container) const;
  // Drops a record from memory (retention, a submission whose commit failed, another
  // replica's deletion), compacting the listing order behind it.
  void RemoveContainer(const std::string& id);
  // Container IDs in submission order (the listing order), as requests beside the queue wait.
  void SortBySubmission(std::deque<std::string>& ids) const;
  // A pass that tries nothing (no room anywhere) still keeps `pending` bounded: entries that
  // started or ended since are dropped once they are half the list (`waiting`: the live ones by
  // incarnation), so submissions and deletions meanwhile cannot grow it without bound.
  void DropStalePending(std::deque<std::string>& pending,
                        const std::unordered_map<std::string, int>& waiting);
  // Queue positions and reasons changed.
  void QueueChanged() { ++queue_version; }
  // The last queue report, asking the report thread for a new one when the queue changed since.
  std::shared_ptr<const QueueReport> ReadQueueReport();
  // Unavailable naming why when the store cannot write now: changes are refused meanwhile.
  Status WriteRefusal() const;
  // The tenancy of that name, created (with a new incarnation) when missing.
  Result<const fleet::Tenancy*> EnsureTenancy(const std::string& name,
                                              std::vector<fleet::Mutation>& out);
  // A GPU record changed outside SetGpuState (a new one): the lease file is written again.
  void MarkLeasesChanged() { lease_dirty_ = true; }
  // Hands the mutations to the store (writing the lease file first when a GPU changed). When
  // the store cannot write them, they are kept in `unsaved` (RetryUnsaved writes them again).
  void Commit(std::vector<fleet::Mutation> mutations, std::function<void(Status)> done);
  // Writes what the store could not write before: the records as they are now, the deletions
  // and usage records as they were. Called by the scheduler thread while any is kept.
  void RetryUnsaved();
  // Whether a usage record of `container_id` is still waiting to be written.
  bool UsageUnsaved(const std::string& container_id) const;

  // Called by the backend from any thread: queued for the scheduler.
  void OnExit(const std::string& id, const backends::ExitInfo& info);

  // A tenancy's storage entitlements from its record (validated when they were set).
  static tenancy::StorageEntitlements StorageOf(const fleet::Tenancy& record);

 private:
  // FinishContainer's steps. Its end state and reason as `info` says (a stop the scheduler
  // decided keeps its own reason).
  void MarkEnded(fleet::ContainerRecord& container, const backends::ExitInfo& info);
  // The queue forgets it, and fair share is charged up to the end the runtime reported (its
  // finished_ms; `ran`: false when it never started).
  void ChargeEnded(const fleet::ContainerRecord& container, int64_t now_ms, bool ran);
  // Its usage record for the same commit that releases its GPUs, or, when it never ran, the
  // meter stops counting it.
  void MeterEnded(const fleet::ContainerRecord& container, bool ran,
                  std::vector<fleet::Mutation>& out);
  void WriteLeaseFile();
  void ReleaseMigSlices(fleet::GpuRecord& gpu, const fleet::ContainerRecord& container,
                        std::vector<fleet::Mutation>& out);
  void ReleaseShare(fleet::GpuRecord& gpu, const fleet::ContainerRecord& container,
                    std::vector<fleet::Mutation>& out);
  // A share left the MIG slice `mig_device` of `gpu`: the slice names another share still there.
  void LeaveSharedSlice(fleet::GpuRecord& gpu, const std::string& mig_device);
  // A holder of part of `gpu` (a MIG slice, a share) is gone: the lease passes to another
  // holder (`next_container`), or with none left the whole GPU goes to its check.
  void PassLeaseOn(fleet::GpuRecord& gpu, const fleet::ContainerRecord& container,
                   const std::string& next_container, const std::string& next_tenancy,
                   std::vector<fleet::Mutation>& out);

  bool lease_dirty_ = true;  // a GPU changed since the lease file was written
  std::string lease_file_written_;
};

}  // namespace tessera::serve

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
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "backends/backend.h"
#include "common/error.h"
#include "fleet/fleet.h"
#include "placement/placement.h"
#include "serve/metering.h"
#include "serve/types.h"
#include "topology/topology.h"

namespace tessera::serve {

class Model {
 public:
  Model(const ServiceOptions& options, fleet::Store& store) : options(options), store(store) {}
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
  // tenancy -> GPUs its running MIG slices and shares make up (each by its fraction of a GPU)
  std::map<std::string, double> mig_in_use;
  std::unordered_map<std::string, int> mig_waiting;  // tenancy -> its MIG requests waiting
  // Share containers waiting for room on a GPU, in submission order (as mig_pending).
  std::deque<std::string> share_pending;
  std::unordered_map<std::string, int> share_waiting;  // tenancy -> its share requests waiting
  // Set by the service before any thread starts: a GPU's last share is gone (its MPS daemon torn
  // down, compute mode and time-slice put back). The checker runs it before the GPU's check; an
  // error quarantines the GPU.
  std::function<Status(const fleet::GpuRecord&)> unshare;
  std::deque<ExitEvent> exits;
  std::deque<std::string> to_check;          // GPUs in releasing, by ID
  std::deque<std::string> to_stop;           // running containers a client deleted
  std::unordered_set<std::string> starting;  // containers whose backend Start has not returned
  // Exits reported before their container's Start returned; applied after it.
  std::unordered_map<std::string, backends::ExitInfo> early_exits;
  int busy = 0;             // starts, stops and checks under way outside the lock
  bool reschedule = false;  // something changed that may let a pending container be placed
  // The queue of GPU containers (scheduling policy): every pending GPU container, each tenancy's
  // policy, and what runs, for quotas and shares. Containers without GPUs never enter it (they
  // start from `pending` at once). Set before any thread starts.
  std::optional<scheduling::Scheduler> queue;
  // After the last scheduling pass: the GPU containers still pending, in dispatch order, with
  // why each waits.
  std::vector<QueueEntry> waiting;
  std::unordered_map<std::string, size_t> waiting_index;  // container ID -> index in waiting
  // GPU-seconds of ended containers (their usage records) and queue waits, per tenancy.
  Meter meter;
  std::condition_variable scheduler_wake;
  std::condition_variable checker_wake;
  std::condition_variable idle;

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
  void FinishContainer(fleet::ContainerRecord& container, const backends::ExitInfo& info,
                       std::vector<fleet::Mutation>& out);
  // A new record, at the end of the listing order, its key indexed.
  void AddContainer(fleet::ContainerRecord container);
  // The tenancy of that name, created (with a new incarnation) when missing.
  Result<const fleet::Tenancy*> EnsureTenancy(const std::string& name,
                                              std::vector<fleet::Mutation>& out);
  // A GPU record changed outside SetGpuState (a new one): the lease file is written again.
  void MarkLeasesChanged() { lease_dirty_ = true; }
  // Hands the mutations to the store (writing the lease file first when a GPU changed).
  void Commit(std::vector<fleet::Mutation> mutations, std::function<void(Status)> done);

  // Called by the backend from any thread: queued for the scheduler.
  void OnExit(const std::string& id, const backends::ExitInfo& info);

  // A tenancy's storage entitlements from its record (validated when they were set).
  static tenancy::StorageEntitlements StorageOf(const fleet::Tenancy& record);

 private:
  void WriteLeaseFile();
  void ReleaseMigSlices(fleet::GpuRecord& gpu, const fleet::ContainerRecord& container,
                        std::vector<fleet::Mutation>& out);
  void ReleaseShare(fleet::GpuRecord& gpu, const fleet::ContainerRecord& container,
                    std::vector<fleet::Mutation>& out);

  bool lease_dirty_ = true;  // a GPU changed since the lease file was written
  std::string lease_file_written_;
};

}  // namespace tessera::serve

// The scheduler (leader only): one thread that applies exits, runs the scheduling policy's passes
// over the queue of GPU containers (serially, so decisions see one another), stops containers at
// their duration limit or for preemption, hands starts and stops to a bounded pool, and sweeps
// finished records by the retention policy. Only the replica that leads runs it: it is the one
// writer of placements and leases.
//
// A pass runs only when an input changed (GPUs freed, a request that could start or reserve
// arrived, a policy), at most one at a time however many changes came, and it ends once nothing
// more can start and no reservation can change: its cost follows what can change, not how many
// requests wait. Positions and reasons are worked out only when someone reads them, by a second
// thread on a copy of the queue (so the model's lock is held for the copy, not the walk), at most
// a tenth of its time busy.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "backends/backend.h"
#include "serve/model.h"
#include "serve/shared_gpus.h"

namespace boost::asio {
class thread_pool;
}

namespace tessera::serve {

// Whether a pending share container could start now: some GPU has room for it and its
// tenancy's GPU quota lets it in (mu held). A submission asks for a pass only then, so a flood of
// shares that cannot fit runs none.
bool ShareMightStartLocked(const Model& model, const fleet::ContainerRecord& container);

class Scheduler {
 public:
  Scheduler(Model& model, backends::ContainerBackend& backend, SharedGpus& shared);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Placement is written only while `may_place` says so (checked under the model's lock right
  // before each placement): a replica that has lost, or may have lost, the leadership never
  // places. Unset: always (one replica).
  void SetPlacementGuard(std::function<bool()> may_place);
  void Start();
  // Joins the thread, then the pool after the starts and stops already handed to it returned.
  void Stop();

 private:
  void Loop();
  // Loop's steps, mu held. Waits (releasing mu) until there is work or a timer falls due;
  // returns whether the store could not write when the wait began.
  bool WaitForWorkLocked(std::unique_lock<std::mutex>& lock);
  // What the store could not write is tried again, and the retention sweep runs when due;
  // returns whether the store can write.
  bool RetryAndSweepLocked(bool failing, std::chrono::milliseconds sweep_interval);
  // Reported exits end their containers (those still starting end after their start).
  void ApplyExitsLocked();
  // A placement pass: containers without GPUs, the queue's pass on `fleet` (when there is
  // one), MIG slices and shares; what was placed starts once it is durable.
  void PlacePendingLocked(placement::Fleet* fleet);
  // mu held. The placement model the queue schedules on, its free GPUs made those of the lease
  // records: this host as one node (embedded mode) or the fleet's nodes; null when there is none.
  placement::Fleet* SyncFleetLocked();
  // One pass of the scheduling policy: admitted containers get their GPUs reserved and are
  // queued to start; preemption victims are stopped; every container still waiting gets its
  // place and reason.
  void PassLocked(placement::Fleet& fleet, std::vector<fleet::Mutation>& out,
                  std::vector<std::string>& to_start);
  // Pending MIG containers take free slices of their profile (placement::PackMigSlices) on GPUs
  // in MIG mode whose lease lets new slices in, within their tenancy's GPU quota (slices count
  // by their share of the GPU). Without `out` and `to_start` nothing is placed; `waiting` gets
  // those that would wait, with their place among MIG requests and why (the report's MIG part).
  void PlaceMigLocked(std::vector<fleet::Mutation>* out, std::vector<std::string>* to_start,
                      std::vector<QueueEntry>* waiting);
  // Pending share containers take room on a GPU (sharing::ChooseGpu's rule, through its index):
  // never past its memory less the reserve or past 100 % of its compute, one mode per GPU, one
  // tenancy per GPU unless --share-across-tenancies; within their tenancy's GPU quota (a share
  // counts as ShareHolds says: the whole GPU for the first on a GPU its tenancy pays whole).
  // Without `out` and `to_start` nothing is placed; `waiting` gets those that would wait and why.
  void PlaceSharesLocked(std::vector<fleet::Mutation>* out, std::vector<std::string>* to_start,
                         std::vector<QueueEntry>* waiting);
  // The placements and starts of a pass are durable: the starts go to the pool. When they could
  // not be written, nothing starts: the containers fail, saying so.
  void StartPlacedLocked(const std::vector<std::string>& ids, const Status& recorded);
  // The report thread: positions and reasons of the waiting containers, on demand.
  void ReportLoop();
  // Running GPU containers counted in the queue (usage, quotas, what holds which GPU) after a
  // start of leadership or a change of the fleet's nodes; their duration limits armed.
  void AdoptRunningLocked();
  // Stops containers past their maxDurationSeconds.
  void EnforceLimitsLocked(std::vector<fleet::Mutation>& out);
  // mu held: hand a placed container's start, or a stop, to the pool; the start's outcome is
  // applied under mu when it returns.
  void StartOnPoolLocked(const std::string& id, std::vector<fleet::Mutation>& out);
  void StopOnPoolLocked(const std::string& id);
  void ApplyStartLocked(const std::string& id, const Status& status);
  // Removes the finished records the retention policy no longer keeps, from memory and the
  // store, compacting the listing order; their backend leftovers are removed on the pool.
  void SweepRetentionLocked();
  // Audit records past their retention go, a bounded batch per transaction, on the pool (the
  // deletes wait for the store's writer, never under the model's lock).
  void ExpireAuditLocked();
  bool audit_expiring_ = false;  // mu: a run of ExpireAuditLocked is under way

  Model& model_;
  backends::ContainerBackend& backend_;
  SharedGpus& shared_;                                  // share containers' GPUs made ready
  bool stopping_ = false;                               // guarded by model_.mu
  std::function<bool()> may_place_;                     // guarded by model_.mu
  std::chrono::steady_clock::time_point next_sweep_{};  // scheduler thread only
  // Guarded by model_.mu, like everything below.
  std::optional<placement::Fleet> host_fleet_;  // embedded mode: this host as one node
  // Per node of the placement model: the GPU record (index into model_.gpus) behind each bit.
  std::vector<std::vector<size_t>> gpu_of_bit_;
  std::unordered_map<size_t, std::pair<int, int>> bit_of_gpu_;  // record -> (node, bit)
  std::vector<size_t> adopted_nodes_;  // model_.placement_nodes when running ones were adopted
  bool adopted_ = false;
  // Running containers with a duration limit: when it falls (Unix ms) -> container ID.
  std::multimap<int64_t, std::string> deadlines_;
  bool limits_changed_ = false;  // a limit was armed since the scheduler thread began to wait
  std::chrono::steady_clock::time_point next_retry_{};   // scheduler thread only
  std::chrono::steady_clock::time_point next_report_{};  // report thread only
  std::thread thread_;
  std::thread report_thread_;
  // Backend starts, stops and removals; created in Start(), joined in Stop().
  std::unique_ptr<boost::asio::thread_pool> pool_;
};

}  // namespace tessera::serve

// The GPU container service of one host: the live model (tenancies, containers, GPU leases,
// tokens) over the durable store, placement through the topology module, the lease state
// machine with firmware checks, the backend that runs containers, and the node-local lease
// file. Knows no HTTP: the api module maps its results and errors to responses.
//
// Threads: callers (the HTTP server) call in from any thread; one scheduler thread places pending
// containers (serially), handles exits and sweeps finished records; a bounded pool runs the
// backend's starts and stops; one checker thread runs firmware checks; the store's writer thread
// runs the `done` callbacks of mutating calls once their change is durable.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "backends/backend.h"
#include "common/error.h"
#include "fleet/fleet.h"
#include "placement/placement.h"
#include "serve/bounds.h"
#include "topology/topology.h"

namespace boost::asio {
class thread_pool;
}

namespace tessera::serve {

struct FirmwareCheckOptions {
  // Program run as `PROGRAM <PCI address>` for every GPU (exit 0 = pass); empty: compare the
  // SHA-256 of the device's option ROM (sysfs `rom` under the host root) with its baseline.
  std::string command;
  std::map<std::string, std::string> per_gpu;  // PCI address -> program, overrides `command`
  std::chrono::milliseconds timeout{60000};
};

struct ServiceOptions {
  std::string root = "/";  // host root (a fixture tree in tests)
  std::string data_dir = "tessera-data";
  std::string lease_file = "/run/tessera/leases.json";
  std::string cdi_kind = "nvidia.com/gpu";  // GPUs are given as <cdi_kind>=<UUID or PCI address>
  std::optional<topology::PartitionTable> partition_table;  // partition mode when set
  FirmwareCheckOptions firmware;
  std::chrono::seconds stop_grace{10};
  // Fleet mode (Kubernetes backend): the GPUs are those the nodes publish (UpdateNodes), not this
  // host's; placement chooses a node by `policy`, then GPUs on it with the topology chooser.
  bool fleet = false;
  std::string only_node;  // fleet mode: place only on this node (empty: any)
  placement::Policy policy = placement::Policy::kBinpack;
  RetentionOptions retention;
  // Backend starts and stops run this many at a time, so one slow start (an image pull) does not
  // hold back every other tenancy's.
  int start_workers = 8;
};

// Who is calling: the admin, or one tenancy's token.
struct Caller {
  bool admin = false;
  std::string tenancy;      // when !admin
  std::string tenancy_uid;  // the incarnation of `tenancy` its token was made for

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
};

template <typename T>
using Done = std::function<void(Result<T>)>;

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
  // One node of the fleet as it publishes itself (fleet mode).
  struct NodeInventory {
    std::string name;
    std::vector<fleet::GpuRecord> gpus;  // topology order: pci_address, model, cdi_device
    topology::GpuTopology topology;      // the same GPUs, the same order
    std::optional<topology::PartitionTable> partition_table;  // with this node's PCI addresses
  };
  static Result<std::unique_ptr<Service>> Create(
      ServiceOptions options, Host host, std::unique_ptr<fleet::Store> store,
      std::unique_ptr<backends::ContainerBackend> backend);
  ~Service();
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  // Starts the scheduler and checker threads.
  void Start();
  // Fleet mode: the nodes that publish GPUs now (all of them, each call). New GPUs are added
  // (free); GPUs of nodes no longer listed, or no longer listed by their node, become unavailable
  // (never placed) but keep their records and leases.
  void UpdateNodes(std::vector<NodeInventory> nodes);
  // Stops the threads, after the starts and stops already handed to the pool have returned;
  // running containers are left running (adopted on the next start).
  void Stop();

  // ---- Auth ----
  // Installs the admin token's hash (from the admin token file).
  void SetAdminTokenHash(std::string sha256);
  // PermissionDenied (401 at the edge) for an unknown token.
  Result<Caller> Authenticate(std::string_view token) const;

  // ---- Tenancies ----
  void PutTenancy(const Caller& caller, fleet::Tenancy tenancy, Done<fleet::Tenancy> done);
  Result<fleet::Tenancy> GetTenancy(const Caller& caller, const std::string& name) const;
  std::vector<fleet::Tenancy> ListTenancies(const Caller& caller) const;
  void CreateToken(const Caller& caller, const std::string& tenancy, Done<CreatedToken> done);
  // Storage entitlements (admin only to set; the tenancy's own token may read). Setting them
  // creates the tenancy when missing, like PutTenancy.
  void PutStorage(const Caller& caller, const std::string& tenancy,
                  tenancy::StorageEntitlements storage, Done<tenancy::StorageEntitlements> done);
  Result<tenancy::StorageEntitlements> GetStorage(const Caller& caller,
                                                  const std::string& tenancy) const;
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
  // Blocks on the backend: call it off the I/O thread.
  Result<std::string> Logs(const Caller& caller, const std::string& id);

  // ---- GPUs ----
  std::vector<fleet::GpuRecord> ListGpus(const Caller& caller) const;
  // `gpu_id` is GpuRecord::id(): the PCI address on this host, "<PCI>@<node>" in fleet mode.
  void GpuAdmin(const Caller& caller, const std::string& gpu_id, GpuAction action,
                std::string reason, Done<fleet::GpuRecord> done);

  Counts counts() const;
  const backends::ContainerBackend& backend() const { return *backend_; }

  // For tests and benchmarks: waits until nothing is pending, starting or being checked.
  bool WaitIdle(std::chrono::milliseconds timeout);

 private:
  Service(ServiceOptions options, std::unique_ptr<fleet::Store> store,
          std::unique_ptr<backends::ContainerBackend> backend);

  struct ExitEvent {
    std::string id;
    backends::ExitInfo info;
  };

  Status Load(Host host);
  void Reconcile();
  void SchedulerLoop();
  void CheckerLoop();
  // Everything below runs with mu_ held and returns the mutations to commit (in order).
  void SetGpuState(fleet::GpuRecord& gpu, fleet::LeaseState state, std::string reason,
                   std::vector<fleet::Mutation>& out);
  void ReleaseGpus(fleet::ContainerRecord& container, std::vector<fleet::Mutation>& out);
  void FinishContainer(fleet::ContainerRecord& container, const backends::ExitInfo& info,
                       std::vector<fleet::Mutation>& out);
  void SetContainerState(fleet::ContainerRecord& container, fleet::ContainerState state);
  bool TryPlace(fleet::ContainerRecord& container, std::vector<fleet::Mutation>& out);
  bool TryPlaceOnNodes(fleet::ContainerRecord& container, std::vector<fleet::Mutation>& out);
  void RebuildFleetLocked();
  topology::GpuMask FreeMaskLocked(size_t node) const;  // topology order of nodes_[node]
  Status CheckGpuRequestLocked(int gpus) const;
  void CommitLocked(std::vector<fleet::Mutation> mutations, std::function<void(Status)> done);
  void WriteLeaseFileLocked();
  fleet::GpuRecord* FindGpu(const std::string& gpu_id);
  // Pass/fail and the reason; runs without mu_.
  std::pair<bool, std::string> RunFirmwareCheck(const fleet::GpuRecord& gpu) const;
  // The tenancy of that name, created (with a new incarnation) when missing.
  Result<const fleet::Tenancy*> EnsureTenancyLocked(const std::string& name,
                                                    std::vector<fleet::Mutation>& out);
  void OnExit(const std::string& id, const backends::ExitInfo& info);
  // A tenancy's storage entitlements from its record (validated when they were set).
  static tenancy::StorageEntitlements StorageOf(const fleet::Tenancy& record);
  // Scheduler thread (scheduler.cc), mu_ held: hand a placed container's start, or a stop, to
  // the pool; the start's outcome is applied under mu_ when it returns.
  void StartOnPoolLocked(const std::string& id, std::vector<fleet::Mutation>& out);
  void StopOnPoolLocked(const std::string& id);
  void ApplyStartLocked(const std::string& id, const Status& status);
  // Removes the finished records the retention policy no longer keeps, from memory and the
  // store, compacting the listing order; their backend leftovers are removed on the pool.
  void SweepRetentionLocked();

  ServiceOptions options_;
  std::unique_ptr<fleet::Store> store_;
  std::unique_ptr<backends::ContainerBackend> backend_;
  std::optional<topology::GpuChooser> chooser_;

  mutable std::mutex mu_;  // guards everything below until the threads
  std::string admin_hash_;
  std::map<std::string, fleet::Tenancy> tenancies_;
  std::unordered_map<std::string, fleet::ContainerRecord> containers_;
  std::vector<std::string> container_order_;                    // creation order
  std::unordered_map<std::string, size_t> container_position_;  // id -> index in container_order_
  // Tenancy incarnation (uid) '\n' Idempotency-Key -> container ID.
  std::unordered_map<std::string, std::string> idempotency_;
  // Embedded mode: PCI order = topology index. Fleet mode: in order of discovery; only appended.
  std::vector<fleet::GpuRecord> gpus_;
  // Fleet mode: the nodes that publish GPUs, and the placement model over those with a chooser.
  struct Node {
    std::string name;
    std::vector<size_t> gpus;  // indices into gpus_, topology order
    std::optional<topology::GpuChooser> chooser;
    std::shared_ptr<const topology::PartitionPlanner> planner;  // partition mode
    std::vector<int> module_of;  // topology index -> module ID (partition mode)
  };
  std::vector<Node> nodes_;
  std::optional<placement::Fleet> placement_;  // node i = nodes_[placement_nodes_[i]]
  std::vector<size_t> placement_nodes_;
  std::unordered_map<std::string, fleet::TokenRecord> tokens_;  // sha256 -> token
  std::deque<std::string> pending_;                             // container IDs to place
  std::deque<ExitEvent> exits_;
  std::deque<std::string> to_check_;          // GPUs in releasing, by PCI address
  std::deque<std::string> to_stop_;           // running containers a client deleted
  std::unordered_set<std::string> starting_;  // containers whose backend Start has not returned
  // Exits reported before their container's Start returned; applied after it.
  std::unordered_map<std::string, backends::ExitInfo> early_exits_;
  std::array<int64_t, 4> container_counts_{};
  int busy_ = 0;             // starts, stops and checks under way outside the lock
  bool reschedule_ = false;  // something changed that may let a pending container be placed
  bool lease_dirty_ = true;  // a GPU changed since the lease file was written
  bool stopping_ = false;
  std::string lease_file_written_;
  std::condition_variable scheduler_wake_;
  std::condition_variable checker_wake_;
  std::condition_variable idle_;

  std::chrono::steady_clock::time_point next_sweep_{};  // scheduler thread only

  std::thread scheduler_;
  std::thread checker_;
  // Backend starts, stops and removals; created in Start(), joined in Stop().
  std::unique_ptr<boost::asio::thread_pool> pool_;
};

}  // namespace tessera::serve

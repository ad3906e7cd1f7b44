// Fleet placement: which node, and which GPUs on it, get a request for k GPUs. Pure logic over an
// in-memory fleet model, plus the discrete-event simulator behind `tessera fleet simulate` and the
// parser of its trace files (text in, values out).
//
// A node's GPUs are numbered 0..gpu_count-1. On a node with a partition table, GPU i is module
// ID i+1, so GPU masks and the table's module masks are the same bits.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "topology/topology.h"

namespace tessera::placement {

using topology::GpuMask;

enum class GpuState {
  kFree,         // can be given
  kLeased,       // given to a request
  kChecking,     // health check running
  kQuarantined,  // failed a check; kept out until an operator clears it
  kDraining,     // taken out of service; its lease (if any) runs to its end
};
const char* GpuStateName(GpuState state);

enum class Policy {
  // Fragmentation-aware: the node and partition whose use destroys the least future capacity
  // (largest partitions first, so whole nodes and whole halves stay free for big requests); ties
  // go to the fuller node (best fit), then the lower node index.
  kBinpack,
  // Kubernetes' default NodeResourcesFit LeastAllocated scoring: the node with the largest free
  // fraction; ties go to the lower node index (kube-scheduler breaks them at random).
  kSpread,
  // The first node, in order, that can take the request; inside it the first partition in table
  // order (or the lowest free GPUs).
  kFirstFit,
};
const char* PolicyName(Policy policy);
Result<Policy> ParsePolicy(std::string_view name);

struct NodeSpec {
  std::string name;
  int gpu_count = 0;  // 1..64; with a partition table, the table's module count
  // Partition mode when set: only whole partitions are given.
  std::shared_ptr<const topology::PartitionPlanner> partitions;
  // Scoring mode: picks the best-linked free GPUs; without it, the lowest-numbered free GPUs.
  std::shared_ptr<const topology::GpuSetScorer> scorer;
};

struct Placement {
  int node = -1;
  GpuMask gpus = 0;
  std::optional<uint32_t> partition_id;  // partition mode
};

struct FleetOptions {
  // Keep one integer score per node for each (policy, size) in use, updated when the node
  // changes, so a decision is a scan over one small array. Needs every table to be precomputed
  // (boards of up to 12 modules); otherwise, or when off, scores are computed per decision. Both
  // give the same placements.
  bool cache_scores = true;
};

class Fleet {
 public:
  static Result<Fleet> Create(std::vector<NodeSpec> nodes, FleetOptions options = {});
  // `nodes` identical nodes of `gpus_per_node` GPUs, each with `table` (may be null).
  static Result<Fleet> Uniform(int nodes, int gpus_per_node,
                               std::shared_ptr<const topology::PartitionPlanner> table,
                               FleetOptions options = {});
  bool caches_scores() const { return cache_enabled_; }

  int node_count() const { return static_cast<int>(nodes_.size()); }
  const NodeSpec& node(int index) const { return nodes_[index]; }
  int total_gpus() const { return total_gpus_; }
  int free_gpus() const;
  GpuMask free_mask(int node) const { return free_[node]; }
  GpuState state(int node, int gpu) const { return states_[node][gpu]; }

  // Operator and health transitions (checking, quarantined, draining, back to free). Leasing
  // goes through Place/Release only.
  Status SetState(int node, int gpu, GpuState state);

  // Whether some node could ever give `gpus` GPUs (size offered by a partition, or not more GPUs
  // than the node has), with the reason when not.
  Status CanEverPlace(int gpus) const;

  // Places a request for `gpus` GPUs and leases them. FailedPrecondition when no node can ever
  // give that size; NotFound when none can right now.
  Result<Placement> Place(int gpus, Policy policy);
  // Hot path: the same as Place, false when nothing fits (sizes never placeable included).
  bool TryPlace(int gpus, Policy policy, Placement* placement);
  // Returns a placement's GPUs: leased ones become free; ones an operator moved to another state
  // meanwhile keep that state.
  Status Release(const Placement& placement);

  // For callers that keep their own lease model (the serve control plane): the node whose free
  // GPUs are exactly `free`. GPUs leaving the free set become leased unless they already hold
  // another state.
  Status SetFreeMask(int node, GpuMask free);
  // The node Place would choose for `gpus` GPUs by `policy`, leasing nothing; -1 when none fits.
  int ChooseNode(int gpus, Policy policy);

 private:
  bool Within(int node, int gpus, GpuMask free, Policy policy, Placement* placement) const;
  void Lease(const Placement& placement);
  int ChooseNodeDirect(int gpus, Policy policy) const;
  int ChooseNodeCached(int gpus, Policy policy);
  void BuildRanks();
  uint32_t NodeKey(Policy policy, int gpus, int node) const;
  void NodeChanged(int node);

  std::vector<NodeSpec> nodes_;
  std::vector<GpuMask> free_;
  std::vector<GpuMask> all_;
  std::vector<std::vector<GpuState>> states_;
  // Loss key of taking GPUs from a fully free node without a table: that node stops being whole.
  std::vector<unsigned __int128> whole_node_key_;
  uint64_t placeable_sizes_ = 0;  // bit k-1: some node can ever give k GPUs
  int total_gpus_ = 0;

  // Score cache (FleetOptions::cache_scores). Loss keys of every table and of whole nodes are
  // replaced by their dense rank among all keys in the fleet, so a binpack score fits in 32 bits:
  // rank << 7 | free GPUs. Lower is better; kNoFit when the node cannot take the request.
  static constexpr uint32_t kNoFit = UINT32_MAX;
  bool cache_enabled_ = false;
  std::vector<const topology::PartitionPlanner*> planners_;  // distinct tables
  std::vector<int> planner_of_node_;                         // index into planners_, or -1
  std::vector<std::vector<std::vector<uint32_t>>> rank_;     // [planner][size][free mask]
  uint32_t rank_of_zero_ = 0;                                // no-table node, not whole
  std::vector<uint32_t> whole_rank_;                         // no-table node, whole, per node
  std::vector<std::vector<uint32_t>> keys_;                  // [policy * 65 + size][node]
  std::vector<int> cached_;                                  // which keys_ entries are in use
};

// ---------------------------------------------------------------------------------------------
// Traces and the simulator.

inline constexpr const char* kDefaultTenancy = "default";
inline constexpr size_t kMaxTraceTenancyLength = 63;

struct Request {
  double arrival_s = 0;
  double duration_s = 0;
  int gpus = 0;
  std::string tenancy = kDefaultTenancy;
};

// CSV, one request per line: `arrival_s,duration_s,gpus[,tenancy]` (docs/fleet-simulate.md). An
// optional header line with those names, blank lines and `#` comments are allowed. A tenancy is
// 1..63 characters of [a-z0-9-]; without the column it is `default`. Errors name the line.
Result<std::vector<Request>> ParseTraceCsv(std::string_view text);
std::string TraceToCsv(const std::vector<Request>& requests);

struct SyntheticOptions {
  uint64_t seed = 1;
  double load = 0.94;    // offered GPU demand / fleet GPUs
  int total_gpus = 800;  // fleet size the load is relative to
  int requests = 20000;
  double duration_median_s = 3600;  // log-normal: median exp(mu)
  double duration_sigma = 1.0;      // log-normal sigma
  // Request sizes and relative weights.
  std::vector<std::pair<int, double>> size_weights = {{1, 45}, {2, 25}, {4, 15}, {8, 15}};
};
// Poisson arrivals at the rate that offers `load`, log-normal durations, sizes by weight.
// Deterministic: the same options give the same trace on every platform (own RNG and transforms).
Result<std::vector<Request>> SyntheticTrace(const SyntheticOptions& options);

struct SimulationOptions {
  Policy policy = Policy::kBinpack;
  bool queue =
      false;  // requests that do not fit wait (FIFO with backfill) instead of being rejected
  // When set: per request, in arrival order (a stable sort of the input), when it started; NaN
  // for requests that never did.
  std::vector<double>* start_times = nullptr;
};

struct SimulationResult {
  std::string policy;
  int nodes = 0;
  int gpus = 0;
  bool queue = false;
  int64_t requests = 0;
  int64_t admitted = 0;
  int64_t rejected = 0;         // did not fit on arrival (no queue), or never placeable
  int64_t never_placeable = 0;  // sizes no node can give (e.g. 3 GPUs in partition mode)
  std::map<int, int64_t> requests_by_size;
  std::map<int, int64_t> admitted_by_size;
  double offered_gpu_hours = 0;
  double served_gpu_hours = 0;
  double gpu_utilization = 0;  // leased GPU-time / fleet GPU-time, first to last arrival
  double offered_load = 0;     // offered GPU-time / fleet GPU-time over the same window
  double mean_wait_s = 0;      // queue mode: mean wait of admitted requests
  int64_t decisions = 0;       // placement attempts
  double elapsed_s = 0;        // wall time of the event loop
};

// ---- MIG slices ----
// Whole GPUs go through Fleet above; a request for MIG slices takes free MIG devices of one
// profile on GPUs already in MIG mode (layouts are set by `tessera mig apply`, never here).

struct MigSlot {
  std::string profile;  // "1g.10gb", as inventory reports it
  uint32_t compute_slices = 0;
  bool free = true;
};

struct MigParent {
  uint32_t compute_slices = 0;  // the board's total (7 on A100 and H100)
  // Whether its lease lets new slices start (not releasing, checking, quarantined or draining).
  bool placeable = true;
  std::vector<MigSlot> slots;
};

struct MigChoice {
  size_t parent = 0;  // index into the parents given
  size_t slot = 0;    // index into that parent's slots
  friend bool operator==(const MigChoice&, const MigChoice&) = default;
};

// Chooses `count` free slots of `profile`, packing: parents with the most compute slices already
// in use first (so that idle GPUs stay idle for whole-GPU requests, new layouts and their
// checks), then the fewest parents, then the lowest index. FailedPrecondition naming how many are
// free when fewer than `count`; InvalidArgument when count is not 1..kMaxMigSlicesPerRequest.
inline constexpr int kMaxMigSlicesPerRequest = 56;  // 8 GPUs x 7 slices
Result<std::vector<MigChoice>> PackMigSlices(const std::vector<MigParent>& parents,
                                             std::string_view profile, int count);

// The share of its GPU a slice is metered as: its compute slices over the board's (1g on an
// H100: 1/7). 1 for a parent of unknown size.
double MigGpuFraction(uint32_t slice_compute_slices, uint32_t parent_compute_slices);
// Compute slices of a MIG profile from its name: "3g.40gb" -> 3, "1c.3g.40gb" (a compute
// instance of a 3g GPU instance) -> 1, "1g.10gb+me" -> 1; 0 for a name of another shape.
uint32_t MigProfileComputeSlices(std::string_view profile);
// Compute slices of a MIG-capable board by PCI device ID: 4 on A30, 7 on A100, H100, H200 and
// B200.
uint32_t MigBoardComputeSlices(uint16_t pci_device_id);

// The running totals every simulation reports at its end: leased GPU-time inside the window from
// the first to the last arrival (utilization), the waits of admitted requests, and the event
// loop's wall time.
class SimulationMeter {
 public:
  // `requests`: sorted by arrival, not empty.
  explicit SimulationMeter(const std::vector<Request>& requests);
  // Time moves on to `time`: the GPUs in use since the last call were busy until then.
  void Advance(double time);
  void Started(int gpus, double wait_s) {
    busy_ += gpus;
    total_wait_s_ += wait_s;
  }
  void Ended(int gpus) { busy_ -= gpus; }
  // Fills gpu_utilization, offered_load, mean_wait_s and elapsed_s (result.gpus and
  // result.admitted already set).
  void Finish(const std::vector<Request>& requests, SimulationResult& result) const;

 private:
  double window_start_, window_end_, last_time_;
  double busy_gpu_seconds_ = 0, total_wait_s_ = 0;
  int busy_ = 0;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

Result<SimulationResult> Simulate(Fleet fleet, std::vector<Request> requests,
                                  const SimulationOptions& options);

// JSON report. `include_timing` adds decisions_per_second (the only field that varies between
// runs of the same input).
std::string SimulationToJson(const SimulationResult& result, bool include_timing);

}  // namespace tessera::placement

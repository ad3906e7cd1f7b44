// A fleet of MIG-capable GPUs under mixed work (whole GPUs, MIG slices, shares), replayed from a
// trace: MIG shaped by demand (the mig module's planner) against fixed mig-parted-style layouts.
// Pure: text in, figures out (docs/mig-trace-bench.md).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "mig/mig.h"

namespace tessera::placement {

// ---- Traces ----
// One request per line: `arrival_s,tenancy,kind,size,duration_s`, kind whole|mig|share; size is
// a GPU count (whole), a MIG profile name (mig) or `MEMORY_GIB:COMPUTE` (share).

enum class MigRequestKind { kWhole, kMig, kShare };
const char* MigRequestKindName(MigRequestKind kind);

struct MigTraceRequest {
  double arrival_s = 0;
  std::string tenancy;
  MigRequestKind kind = MigRequestKind::kWhole;
  int gpus = 0;                 // whole: 1..kMaxWholeGpus on one node
  std::string profile;          // mig: "1g.10gb"
  double share_memory_gib = 0;  // share: 1..kMaxShareMemoryGib
  double share_compute = 0;     // share: (0, 1], the fraction of the GPU's compute
  double duration_s = 0;
};

inline constexpr size_t kMaxMigTraceLineLength = 256;
inline constexpr size_t kMaxMigTraceRequests = 10'000'000;
inline constexpr size_t kMaxMigTraceBytes = kMaxMigTraceRequests * 64;
inline constexpr size_t kMaxMigTraceNameLength = 63;  // tenancy and profile
inline constexpr int kMaxWholeGpus = 8;
inline constexpr double kMaxShareMemoryGib = 80;
inline constexpr double kMaxMigTraceSeconds = 1e9;  // arrival and duration

// Parses a trace. A header line with the field names, blank lines and `#` comments are allowed.
// Errors name the line and never echo more than a short excerpt of it.
Result<std::vector<MigTraceRequest>> ParseMigTrace(std::string_view text);
std::string MigTraceToText(const std::vector<MigTraceRequest>& requests);

struct MigTraceOptions {
  uint64_t seed = 41;
  double hours = 24;     // arrivals over this window
  int total_gpus = 800;  // the fleet the load is relative to
  double load = 1.0;     // offered GPU fraction-time / fleet GPU-time
  int tenancies = 10;
  double duration_median_s = 1800;  // log-normal durations: median, sigma, cap
  double duration_sigma = 1.3;
  double duration_cap_s = 48 * 3600.0;
  // The mix of MIG profiles drifts from small slices to larger ones and back over the window
  // (0: a fixed mix; 1: the full drift).
  double drift = 1;
};
// Poisson arrivals at the rate that offers `load`; kinds 15% whole (1/2/4/8 GPUs), 65% mig,
// 20% share. Deterministic for a seed on every platform.
Result<std::vector<MigTraceRequest>> GenerateMigTrace(const MigTraceOptions& options);

// ---- Fleet layouts ----

// A fixed layout of one GPU: empty = whole (MIG off), else the profiles of its instances.
struct StaticLayout {
  std::string name;  // "whole", "all-1g", "4g+3g"
  std::vector<std::string> profiles;
};
// The family searched: whole, all-1g, 4x1g.20gb, 3x2g+1g, 2x3g, 3g+2g+1g+1g, 4g+3g, 4g+2g+1g,
// 4g+1g+1g+1g, 7g.
std::vector<StaticLayout> StaticLayoutFamily();

// How a fleet is laid out: `count` consecutive nodes with each layout, in order.
struct FleetSplit {
  std::vector<std::pair<StaticLayout, int>> nodes;
  std::string Describe() const;  // "25 nodes whole, 75 nodes 4g+3g"
};

// ---- The simulator ----

enum class MigPolicy { kByDemand, kStatic };

struct MigSimOptions {
  int nodes = 100;
  int gpus_per_node = 8;
  MigPolicy policy = MigPolicy::kByDemand;
  FleetSplit split;             // kStatic only; its node counts sum to `nodes`
  double horizon_s = 0;         // 0: the last arrival
  bool time_decisions = false;  // kByDemand: wall time of each MIG decision
};

struct MigSimResult {
  double horizon_s = 0;
  int64_t requests = 0;
  int64_t started = 0;
  int64_t waiting_at_end = 0;   // arrived by the horizon, placeable, not started
  int64_t never_placeable = 0;  // a profile or size this fleet can never give
  double gpu_hours = 0;    // delivered within [0, horizon]: whole 1, slice compute/7, share compute
  double utilization = 0;  // gpu_hours / fleet GPU-hours
  // Waits of requests arrived by the horizon; one not started (never placeable ones too) counts
  // horizon - arrival.
  double wait_p50_s = 0, wait_p95_s = 0;
  int64_t instances_created = 0, instances_destroyed = 0, mode_changes = 0;
  double reconfigurations_per_hour = 0;  // (created + destroyed + mode changes) / horizon hours
  std::vector<double> decision_us;       // time_decisions: one per MIG decision
  // By kind (whole, mig, share): GPU-hours, requests waiting at the end, p95 wait.
  double gpu_hours_by_kind[3] = {0, 0, 0};
  int64_t waiting_by_kind[3] = {0, 0, 0};
  double wait_p95_s_by_kind[3] = {0, 0, 0};
};

// The trace need not be sorted. InvalidArgument for a fleet or split that does not add up.
Result<MigSimResult> SimulateMigFleet(const std::vector<MigTraceRequest>& trace,
                                      const MigSimOptions& options);

// The best static split in hindsight, by GPU-hours, then p95 wait: (1) 0..all nodes whole in
// eighths, the rest one layout of the family; (2) at the best whole count, the four best layouts
// in pairs (1/4, 1/2, 3/4 of the MIG nodes) and threes (thirds); (3) from the best so far, moves
// of 8, then 4, then 2 nodes from one layout to another while one improves. At most
// `max_candidates` splits are simulated.
struct StaticSearchResult {
  FleetSplit split;
  MigSimResult result;
  int candidates = 0;
};
Result<StaticSearchResult> SearchStaticLayouts(const std::vector<MigTraceRequest>& trace,
                                               const MigSimOptions& base, int max_candidates = 400);

}  // namespace tessera::placement

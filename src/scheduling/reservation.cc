// Where the request at the head of the line will start first: the node and GPUs (a whole
// partition in partition mode) whose running work ends earliest.
#include <algorithm>

#include "scheduling/scheduling.h"

namespace tessera::scheduling {

using placement::GpuMask;
using placement::GpuState;
using topology::MaskSize;

bool Scheduler::ChooseReservation(const placement::Fleet& fleet, int gpus,
                                  const std::vector<GpuMask>& taken, double now_s,
                                  Reservation* out) const {
  struct Candidate {
    double ready = kUnknownTime;
    int busy = 0;  // GPUs still in use: fewer drain sooner when ends are unknown
    int node = -1;
    GpuMask gpus = 0;
    std::optional<uint32_t> partition_id;
  };
  std::optional<Candidate> best;
  auto better = [](const Candidate& a, const Candidate& b) {
    if (a.ready != b.ready) return a.ready < b.ready;
    if (a.busy != b.busy) return a.busy < b.busy;
    return a.node < b.node;  // candidates of one node arrive in table order: first stays
  };
  // When GPU `gpu` of `node` can be given: now when free, the end of its holder's limit when a
  // request holds it, unknown for a GPU being checked; never (nullopt) when quarantined,
  // draining or reserved already.
  auto ready_of = [&](int node, int gpu) -> std::optional<double> {
    if ((taken[node] >> gpu) & 1) return std::nullopt;
    if ((fleet.free_mask(node) >> gpu) & 1) return now_s;
    const GpuState state = fleet.state(node, gpu);
    if (state == GpuState::kQuarantined || state == GpuState::kDraining) return std::nullopt;
    if (state == GpuState::kLeased && gpu_owner_[node][gpu] != 0) return gpu_ends_[node][gpu];
    return kUnknownTime;
  };

  for (int node = 0; node < fleet.node_count(); ++node) {
    const placement::NodeSpec& spec = fleet.node(node);
    if (spec.gpu_count < gpus) continue;
    if (spec.partitions) {
      const topology::PartitionPlanner& planner = *spec.partitions;
      for (int index = 0; index < planner.partition_count(); ++index) {
        const GpuMask mask = planner.partition_mask(index);
        if (MaskSize(mask) != gpus) continue;
        Candidate candidate{now_s, 0, node, mask, planner.table().partitions[index].id};
        bool possible = true;
        for (GpuMask m = mask; m && possible; m &= m - 1) {
          const int gpu = __builtin_ctzll(m);
          auto ready = ready_of(node, gpu);
          if (!ready) {
            possible = false;
            break;
          }
          candidate.ready = std::max(candidate.ready, *ready);
          if (*ready > now_s) ++candidate.busy;
        }
        if (possible && (!best || better(candidate, *best))) best = candidate;
      }
      continue;
    }
    // No table: the `gpus` GPUs that are ready first.
    std::vector<std::pair<double, int>> ready_gpus;
    for (int gpu = 0; gpu < spec.gpu_count; ++gpu) {
      if (auto ready = ready_of(node, gpu)) ready_gpus.push_back({*ready, gpu});
    }
    if (static_cast<int>(ready_gpus.size()) < gpus) continue;
    std::sort(ready_gpus.begin(), ready_gpus.end());
    Candidate candidate{now_s, 0, node, 0, std::nullopt};
    for (int i = 0; i < gpus; ++i) {
      candidate.gpus |= GpuMask{1} << ready_gpus[i].second;
      candidate.ready = std::max(candidate.ready, ready_gpus[i].first);
      if (ready_gpus[i].first > now_s) ++candidate.busy;
    }
    if (!best || better(candidate, *best)) best = candidate;
  }
  if (!best) return false;
  out->node = best->node;
  out->gpus = best->gpus;
  out->partition_id = best->partition_id;
  out->ready_s = best->ready;
  return true;
}

}  // namespace tessera::scheduling

// Preemption choice: for a request holding a reservation, running preemptible requests whose
// GPUs would let it start now. A victim qualifies when it has a lower priority than the request,
// or when the request's tenancy is below its share and the victim's tenancy above its own.
#include <algorithm>
#include <unordered_set>

#include "scheduling/scheduling.h"

namespace tessera::scheduling {

using placement::GpuMask;
using topology::MaskSize;

namespace {

// Without a partition table any GPUs will do: the free ones not reserved, then the rest in
// order (the eligibility check above refuses the set when a needed holder may not be stopped).
GpuMask NoTableSet(const placement::Fleet& fleet, int node, int gpus, GpuMask reserved) {
  const GpuMask free = fleet.free_mask(node) & ~reserved;
  GpuMask set = 0;
  int count = 0;
  for (GpuMask m = free; m && count < gpus; m &= m - 1, ++count)
    set |= m & (~m + 1);
  for (int gpu = 0; gpu < fleet.node(node).gpu_count && count < gpus; ++gpu) {
    const GpuMask bit = GpuMask{1} << gpu;
    if ((set | reserved) & bit) continue;
    set |= bit;
    ++count;
  }
  return count == gpus ? set : 0;
}

}  // namespace

std::vector<Preemption> Scheduler::ChoosePreemptions(const placement::Fleet& fleet,
                                                     const PassResult& pass,
                                                     const std::vector<GpuMask>& reserved,
                                                     double now_s) const {
  std::vector<Preemption> out;
  // Share against target per tenancy, as Usage() reports them.
  std::vector<double> over(tenancies_.size(), 0);  // share - target
  {
    const std::vector<TenancyUsage> usage = Usage();
    for (size_t t = 0; t < usage.size(); ++t)
      over[t] = usage[t].share - usage[t].target;
  }
  std::unordered_set<RequestId> taken_victims;
  for (size_t r = 0; r < pass.reservations.size(); ++r) {
    const Reservation& reservation = pass.reservations[r];
    if (reservation.ready_s <= now_s) continue;  // its GPUs are free already
    auto victims = ChooseVictims(fleet, reservation, reserved, now_s, over, taken_victims);
    if (victims.empty()) continue;
    for (RequestId victim : victims)
      taken_victims.insert(victim);
    out.push_back({reservation.holder, std::move(victims)});
  }
  return out;
}

std::vector<RequestId> Scheduler::ChooseVictims(
    const placement::Fleet& fleet, const Reservation& reservation,
    const std::vector<GpuMask>& reserved, double now_s, const std::vector<double>& over,
    const std::unordered_set<RequestId>& taken_victims) const {
  auto holder_it = pending_.find(reservation.holder);
  if (holder_it == pending_.end()) return {};
  const Pending& holder = holder_it->second;
  const int gpus = holder.request.gpus;
  auto eligible = [&](RequestId victim_id) {
    auto it = running_.find(victim_id);
    if (it == running_.end() || !it->second.preemptible) return false;
    if (taken_victims.count(victim_id)) return false;
    const Running& victim = it->second;
    if (victim.tenancy == holder.tenancy) return victim.priority < holder.request.priority;
    if (victim.priority < holder.request.priority) return true;
    return over[holder.tenancy] < 0 && over[victim.tenancy] > 0;
  };
  struct Choice {
    int victim_gpus = 0;
    double lost_gpu_seconds = 0;
    int node = -1;
    std::vector<RequestId> victims;
  };
  std::optional<Choice> best;
  auto consider = [&](int node, GpuMask mask) {
    if (!mask) return;
    // Other reservations' GPUs stay theirs; this reservation's own are fine to use.
    const GpuMask others = reserved[node] & ~(node == reservation.node ? reservation.gpus : 0);
    if (mask & others) return;
    Choice choice;
    choice.node = node;
    for (GpuMask m = mask & ~fleet.free_mask(node); m; m &= m - 1) {
      const int gpu = __builtin_ctzll(m);
      const RequestId owner = gpu_owner_[node][gpu];
      if (owner == 0 || !eligible(owner)) return;
      if (std::find(choice.victims.begin(), choice.victims.end(), owner) == choice.victims.end()) {
        const Running& victim = running_.at(owner);
        choice.victims.push_back(owner);
        choice.victim_gpus += victim.gpus;
        choice.lost_gpu_seconds += victim.gpus * (now_s - victim.started_s);
      }
    }
    if (choice.victims.empty()) return;
    if (!best || choice.victim_gpus < best->victim_gpus ||
        (choice.victim_gpus == best->victim_gpus &&
         choice.lost_gpu_seconds < best->lost_gpu_seconds)) {
      best = std::move(choice);
    }
  };
  for (int node = 0; node < fleet.node_count(); ++node) {
    const placement::NodeSpec& spec = fleet.node(node);
    if (spec.gpu_count < gpus) continue;
    if (spec.partitions) {
      for (int index = 0; index < spec.partitions->partition_count(); ++index) {
        const GpuMask mask = spec.partitions->partition_mask(index);
        if (MaskSize(mask) == gpus) consider(node, mask);
      }
    } else {
      consider(node, NoTableSet(fleet, node, gpus, reserved[node]));
    }
  }
  if (!best) return {};
  return std::move(best->victims);
}

}  // namespace tessera::scheduling

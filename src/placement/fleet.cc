// The fleet model and the three placement policies.
#include <algorithm>

#include "placement/placement.h"

namespace tessera::placement {

using topology::MaskSize;

const char* GpuStateName(GpuState state) {
  switch (state) {
    case GpuState::kFree:
      return "free";
    case GpuState::kLeased:
      return "leased";
    case GpuState::kChecking:
      return "checking";
    case GpuState::kQuarantined:
      return "quarantined";
    case GpuState::kDraining:
      return "draining";
  }
  return "free";
}

const char* PolicyName(Policy policy) {
  switch (policy) {
    case Policy::kBinpack:
      return "binpack";
    case Policy::kSpread:
      return "spread";
    case Policy::kFirstFit:
      return "first-fit";
  }
  return "binpack";
}

Result<Policy> ParsePolicy(std::string_view name) {
  if (name == "binpack") return Policy::kBinpack;
  if (name == "spread") return Policy::kSpread;
  if (name == "first-fit") return Policy::kFirstFit;
  return InvalidArgument("policy \"" + std::string(name) +
                         "\": unknown (binpack, spread, first-fit)");
}

Result<Fleet> Fleet::Create(std::vector<NodeSpec> nodes, FleetOptions options) {
  Fleet fleet;
  for (size_t i = 0; i < nodes.size(); ++i) {
    NodeSpec& node = nodes[i];
    const std::string where =
        "node " + std::to_string(i) + (node.name.empty() ? "" : " (" + node.name + ")");
    if (node.gpu_count < 1 || node.gpu_count > topology::kMaxGpus) {
      return InvalidArgument(where + ": " + std::to_string(node.gpu_count) + " GPUs (expected 1.." +
                             std::to_string(topology::kMaxGpus) + ")");
    }
    if (node.partitions && node.partitions->module_count() != node.gpu_count) {
      return InvalidArgument(where + ": " + std::to_string(node.gpu_count) +
                             " GPUs but its partition table " + node.partitions->table().board +
                             " has " + std::to_string(node.partitions->module_count()) +
                             " modules");
    }
    if (node.scorer && node.scorer->gpu_count() != node.gpu_count) {
      return InvalidArgument(where + ": " + std::to_string(node.gpu_count) +
                             " GPUs but its topology describes " +
                             std::to_string(node.scorer->gpu_count()));
    }
    GpuMask all = node.gpu_count == 64 ? ~GpuMask{0} : (GpuMask{1} << node.gpu_count) - 1;
    fleet.all_.push_back(all);
    fleet.free_.push_back(all);
    fleet.states_.emplace_back(node.gpu_count, GpuState::kFree);
    topology::CapacityLoss whole;
    whole.lost_by_size[std::min(node.gpu_count, topology::kMaxModules)] = 1;
    fleet.whole_node_key_.push_back(whole.Key());
    fleet.total_gpus_ += node.gpu_count;
    for (int size = 1; size <= node.gpu_count; ++size) {
      if (node.partitions ? node.partitions->HasSize(size) : true) {
        fleet.placeable_sizes_ |= uint64_t{1} << (size - 1);
      }
    }
  }
  fleet.nodes_ = std::move(nodes);
  fleet.cache_enabled_ = options.cache_scores;
  for (const NodeSpec& node : fleet.nodes_) {
    if (node.partitions && !node.partitions->precomputed()) fleet.cache_enabled_ = false;
  }
  if (fleet.cache_enabled_) fleet.BuildRanks();
  return fleet;
}

void Fleet::BuildRanks() {
  std::vector<unsigned __int128> keys = {0};
  planner_of_node_.assign(nodes_.size(), -1);
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const topology::PartitionPlanner* planner = nodes_[i].partitions.get();
    if (!planner) {
      keys.push_back(whole_node_key_[i]);
      continue;
    }
    auto it = std::find(planners_.begin(), planners_.end(), planner);
    planner_of_node_[i] = static_cast<int>(it - planners_.begin());
    if (it != planners_.end()) continue;
    planners_.push_back(planner);
    for (GpuMask free = 0; free <= planner->all_modules(); ++free) {
      for (int size : planner->Sizes()) {
        if (const topology::PartitionChoice* choice = planner->Best(free, size)) {
          keys.push_back(choice->loss_key);
        }
      }
    }
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  auto rank = [&](unsigned __int128 key) {
    return static_cast<uint32_t>(std::lower_bound(keys.begin(), keys.end(), key) - keys.begin());
  };
  rank_of_zero_ = rank(0);
  whole_rank_.resize(nodes_.size());
  for (size_t i = 0; i < nodes_.size(); ++i)
    whole_rank_[i] = rank(whole_node_key_[i]);
  rank_.resize(planners_.size());
  for (size_t p = 0; p < planners_.size(); ++p) {
    const topology::PartitionPlanner* planner = planners_[p];
    rank_[p].resize(planner->module_count() + 1);
    for (int size : planner->Sizes()) {
      std::vector<uint32_t>& table = rank_[p][size];
      table.assign(planner->all_modules() + 1, kNoFit);
      for (GpuMask free = 0; free <= planner->all_modules(); ++free) {
        if (const topology::PartitionChoice* choice = planner->Best(free, size)) {
          table[free] = rank(choice->loss_key);
        }
      }
    }
  }
  keys_.resize(3 * 65);
}

uint32_t Fleet::NodeKey(Policy policy, int gpus, int node) const {
  const GpuMask free = free_[node];
  const uint32_t count = static_cast<uint32_t>(MaskSize(free));
  const int size = nodes_[node].gpu_count;
  const int p = planner_of_node_[node];
  uint32_t rank;
  if (p >= 0) {
    if (gpus > size || rank_[p][gpus].empty()) return kNoFit;
    rank = rank_[p][gpus][free];
    if (rank == kNoFit) return kNoFit;
  } else {
    if (static_cast<int>(count) < gpus) return kNoFit;
    rank = free == all_[node] ? whole_rank_[node] : rank_of_zero_;
  }
  switch (policy) {
    case Policy::kBinpack:
      return rank << 7 | count;
    // Larger free fraction first; fractions of at most 64 GPUs differ by at least 1/4096, more
    // than the 2^-20 resolution, so the order is exact.
    case Policy::kSpread:
      return static_cast<uint32_t>(((size - count) << 20) / size);
    case Policy::kFirstFit:
      return 0;
  }
  return kNoFit;
}

void Fleet::NodeChanged(int node) {
  for (int index : cached_) {
    keys_[index][node] = NodeKey(static_cast<Policy>(index / 65), index % 65, node);
  }
}

int Fleet::ChooseNodeCached(int gpus, Policy policy) {
  const int index = static_cast<int>(policy) * 65 + gpus;
  std::vector<uint32_t>& keys = keys_[index];
  if (keys.empty()) {
    keys.resize(nodes_.size());
    for (int i = 0; i < node_count(); ++i)
      keys[i] = NodeKey(policy, gpus, i);
    cached_.push_back(index);
  }
  // Lowest key, lowest node index on ties.
  uint32_t best_key = kNoFit;
  int best = -1;
  const uint32_t* data = keys.data();
  for (int i = 0, n = node_count(); i < n; ++i) {
    if (data[i] < best_key) {
      best_key = data[i];
      best = i;
    }
  }
  return best;
}

Result<Fleet> Fleet::Uniform(int nodes, int gpus_per_node,
                             std::shared_ptr<const topology::PartitionPlanner> table,
                             FleetOptions options) {
  if (nodes < 1 || nodes > 1000000) {
    return InvalidArgument("nodes: " + std::to_string(nodes) + " (expected 1..1000000)");
  }
  std::vector<NodeSpec> specs(nodes);
  for (int i = 0; i < nodes; ++i) {
    specs[i].name = "node-" + std::to_string(i);
    specs[i].gpu_count = gpus_per_node;
    specs[i].partitions = table;
  }
  return Create(std::move(specs), options);
}

int Fleet::free_gpus() const {
  int free = 0;
  for (GpuMask mask : free_)
    free += MaskSize(mask);
  return free;
}

Status Fleet::SetState(int node, int gpu, GpuState state) {
  if (node < 0 || node >= node_count()) {
    return NotFound("node " + std::to_string(node) + ": no such node");
  }
  if (gpu < 0 || gpu >= nodes_[node].gpu_count) {
    return NotFound("node " + std::to_string(node) + " GPU " + std::to_string(gpu) +
                    ": no such GPU");
  }
  if (state == GpuState::kLeased) {
    return InvalidArgument("GPUs are leased only by placing a request");
  }
  GpuState& current = states_[node][gpu];
  if (current == GpuState::kLeased && state == GpuState::kFree) {
    return FailedPrecondition("node " + std::to_string(node) + " GPU " + std::to_string(gpu) +
                              " is leased; release its placement instead");
  }
  current = state;
  const GpuMask bit = GpuMask{1} << gpu;
  if (state == GpuState::kFree) {
    free_[node] |= bit;
  } else {
    free_[node] &= ~bit;
  }
  if (cache_enabled_) NodeChanged(node);
  return Ok();
}

Status Fleet::SetFreeMask(int node, GpuMask free) {
  if (node < 0 || node >= node_count()) {
    return NotFound("node " + std::to_string(node) + ": no such node");
  }
  if (free & ~all_[node]) return InvalidArgument("free mask names GPUs the node does not have");
  if (free == free_[node]) return Ok();
  for (int gpu = 0; gpu < nodes_[node].gpu_count; ++gpu) {
    GpuState& state = states_[node][gpu];
    if ((free >> gpu) & 1) {
      state = GpuState::kFree;
    } else if (state == GpuState::kFree) {
      state = GpuState::kLeased;
    }
  }
  free_[node] = free;
  if (cache_enabled_) NodeChanged(node);
  return Ok();
}

int Fleet::ChooseNode(int gpus, Policy policy) {
  if (gpus < 1 || gpus > 64 || !((placeable_sizes_ >> (gpus - 1)) & 1)) return -1;
  const int best = cache_enabled_ ? ChooseNodeCached(gpus, policy) : ChooseNodeDirect(gpus, policy);
  Placement placement;
  if (best < 0 || !Within(best, gpus, free_[best], policy, &placement)) return -1;
  return best;
}

Status Fleet::CanEverPlace(int gpus) const {
  if (gpus < 1) return InvalidArgument("request for " + std::to_string(gpus) + " GPUs");
  if (gpus <= 64 && (placeable_sizes_ >> (gpus - 1)) & 1) return Ok();
  std::string sizes;
  for (int size = 1; size <= 64; ++size) {
    if ((placeable_sizes_ >> (size - 1)) & 1)
      sizes += (sizes.empty() ? "" : ", ") + std::to_string(size);
  }
  return FailedPrecondition("no node can give " + std::to_string(gpus) +
                            " GPUs: in partition mode only whole fabric partitions are given "
                            "(sizes this fleet can give: " +
                            sizes + ")");
}

bool Fleet::Within(int node, int gpus, GpuMask free, Policy policy, Placement* placement) const {
  const NodeSpec& spec = nodes_[node];
  placement->node = node;
  placement->partition_id.reset();
  if (spec.partitions) {
    if (policy == Policy::kFirstFit) {
      int index = spec.partitions->FirstFit(free, gpus);
      if (index < 0) return false;
      placement->gpus = spec.partitions->partition_mask(index);
      placement->partition_id = spec.partitions->table().partitions[index].id;
      return true;
    }
    const topology::PartitionChoice* choice = spec.partitions->Best(free, gpus);
    if (!choice) return false;
    placement->gpus = choice->modules;
    placement->partition_id = choice->partition_id;
    return true;
  }
  if (MaskSize(free) < gpus) return false;
  if (spec.scorer && policy != Policy::kFirstFit) {
    auto chosen = spec.scorer->Choose(free, gpus);
    if (!chosen) return false;
    placement->gpus = *chosen;
    return true;
  }
  GpuMask set = 0;
  for (int i = 0; i < gpus; ++i) {
    GpuMask low = free & (~free + 1);
    set |= low;
    free &= ~low;
  }
  placement->gpus = set;
  return true;
}

bool Fleet::TryPlace(int gpus, Policy policy, Placement* placement) {
  if (gpus < 1 || gpus > 64 || !((placeable_sizes_ >> (gpus - 1)) & 1)) return false;
  const int best = cache_enabled_ ? ChooseNodeCached(gpus, policy) : ChooseNodeDirect(gpus, policy);
  if (best < 0 || !Within(best, gpus, free_[best], policy, placement)) return false;
  Lease(*placement);
  return true;
}

int Fleet::ChooseNodeDirect(int gpus, Policy policy) const {
  const int n = node_count();
  int best = -1;
  switch (policy) {
    case Policy::kBinpack: {
      unsigned __int128 best_key = 0;
      int best_free = 0;
      for (int i = 0; i < n; ++i) {
        const GpuMask free = free_[i];
        const int count = MaskSize(free);
        if (count < gpus) continue;
        unsigned __int128 key;
        if (nodes_[i].partitions) {
          const topology::PartitionChoice* choice = nodes_[i].partitions->Best(free, gpus);
          if (!choice) continue;
          key = choice->loss_key;
        } else {
          key = free == all_[i] ? whole_node_key_[i] : 0;
        }
        if (best < 0 || key < best_key || (key == best_key && count < best_free)) {
          best = i;
          best_key = key;
          best_free = count;
        }
      }
      break;
    }
    case Policy::kSpread: {
      int best_free = 0, best_size = 1;
      for (int i = 0; i < n; ++i) {
        const GpuMask free = free_[i];
        const int count = MaskSize(free);
        if (count < gpus) continue;
        if (nodes_[i].partitions && !nodes_[i].partitions->Best(free, gpus)) continue;
        // LeastAllocated: larger free fraction wins (compared without division).
        const int size = nodes_[i].gpu_count;
        if (best < 0 || count * best_size > best_free * size) {
          best = i;
          best_free = count;
          best_size = size;
        }
      }
      break;
    }
    case Policy::kFirstFit: {
      for (int i = 0; i < n && best < 0; ++i) {
        const GpuMask free = free_[i];
        if (MaskSize(free) < gpus) continue;
        if (nodes_[i].partitions && nodes_[i].partitions->FirstFit(free, gpus) < 0) continue;
        best = i;
      }
      break;
    }
  }
  return best;
}

void Fleet::Lease(const Placement& placement) {
  free_[placement.node] &= ~placement.gpus;
  for (GpuMask m = placement.gpus; m; m &= m - 1) {
    states_[placement.node][__builtin_ctzll(m)] = GpuState::kLeased;
  }
  if (cache_enabled_) NodeChanged(placement.node);
}

Result<Placement> Fleet::Place(int gpus, Policy policy) {
  if (auto possible = CanEverPlace(gpus); !possible) return possible.error();
  Placement placement;
  if (!TryPlace(gpus, policy, &placement)) {
    return NotFound("no node has " + std::to_string(gpus) +
                    " free GPUs that can be given together (" + std::to_string(free_gpus()) +
                    " of " + std::to_string(total_gpus_) + " GPUs free)");
  }
  return placement;
}

Status Fleet::Release(const Placement& placement) {
  if (placement.node < 0 || placement.node >= node_count()) {
    return NotFound("placement on node " + std::to_string(placement.node) + ": no such node");
  }
  if (placement.gpus & ~all_[placement.node]) {
    return InvalidArgument("placement names GPUs the node does not have");
  }
  for (GpuMask m = placement.gpus; m; m &= m - 1) {
    int gpu = __builtin_ctzll(m);
    if (states_[placement.node][gpu] == GpuState::kFree) {
      return FailedPrecondition("node " + std::to_string(placement.node) + " GPU " +
                                std::to_string(gpu) + " is not leased");
    }
  }
  for (GpuMask m = placement.gpus; m; m &= m - 1) {
    int gpu = __builtin_ctzll(m);
    if (states_[placement.node][gpu] == GpuState::kLeased) {
      states_[placement.node][gpu] = GpuState::kFree;
      free_[placement.node] |= GpuMask{1} << gpu;
    }
  }
  if (cache_enabled_) NodeChanged(placement.node);
  return Ok();
}

}  // namespace tessera::placement

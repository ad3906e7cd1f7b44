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

Result<Fleet> Fleet::Create(std::vector<NodeSpec> nodes) {
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
  return fleet;
}

Result<Fleet> Fleet::Uniform(int nodes, int gpus_per_node,
                             std::shared_ptr<const topology::PartitionPlanner> table) {
  if (nodes < 1 || nodes > 1000000) {
    return InvalidArgument("nodes: " + std::to_string(nodes) + " (expected 1..1000000)");
  }
  std::vector<NodeSpec> specs(nodes);
  for (int i = 0; i < nodes; ++i) {
    specs[i].name = "node-" + std::to_string(i);
    specs[i].gpu_count = gpus_per_node;
    specs[i].partitions = table;
  }
  return Create(std::move(specs));
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
  return Ok();
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
  if (best < 0 || !Within(best, gpus, free_[best], policy, placement)) return false;
  Lease(*placement);
  return true;
}

void Fleet::Lease(const Placement& placement) {
  free_[placement.node] &= ~placement.gpus;
  for (GpuMask m = placement.gpus; m; m &= m - 1) {
    states_[placement.node][__builtin_ctzll(m)] = GpuState::kLeased;
  }
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
  return Ok();
}

}  // namespace tessera::placement

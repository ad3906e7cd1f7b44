// Partition choice by least loss of future capacity, and the activation state of one board.
#include <algorithm>

#include "topology/topology.h"

namespace tessera::topology {
namespace {

// Boards up to this many modules get every (free set, size) answer precomputed: 4096 free sets.
constexpr int kMaxPrecomputedModules = 12;

std::string SizeList(const std::vector<int>& sizes) {
  std::string out;
  for (int size : sizes)
    out += (out.empty() ? "" : ", ") + std::to_string(size);
  return out;
}

}  // namespace

unsigned __int128 CapacityLoss::Key() const {
  // 7 bits per size: at most 64 partitions, so a count never exceeds 64.
  unsigned __int128 key = 0;
  for (int size = kMaxModules; size >= 1; --size)
    key = (key << 7) | lost_by_size[size];
  return key;
}

PartitionPlanner::PartitionPlanner(PartitionTable table) : table_(std::move(table)) {
  size_slot_.fill(-1);
  for (auto& partition : table_.partitions) {
    std::sort(partition.modules.begin(), partition.modules.end());
    GpuMask mask = 0;
    for (int module : partition.modules)
      mask |= GpuMask{1} << (module - 1);
    masks_.push_back(mask);
    int size = static_cast<int>(partition.modules.size());
    sizes_.push_back(size);
    if (size_slot_[size] < 0) size_slot_[size] = slot_count_++;
  }
}

Result<std::shared_ptr<const PartitionPlanner>> PartitionPlanner::Create(PartitionTable table) {
  if (auto valid = ValidatePartitionTable(table); !valid) return valid.error();
  std::shared_ptr<PartitionPlanner> planner(new PartitionPlanner(std::move(table)));
  if (planner->module_count() <= kMaxPrecomputedModules) {
    const size_t sets = size_t{1} << planner->module_count();
    planner->precomputed_.resize(sets * planner->slot_count_);
    for (GpuMask free = 0; free < sets; ++free) {
      for (int size = 1; size <= planner->module_count(); ++size) {
        int slot = planner->size_slot_[size];
        if (slot < 0) continue;
        auto best = planner->ChooseSlow(free, size, 0);
        planner->precomputed_[free * planner->slot_count_ + slot] =
            best ? *best : PartitionChoice{};
      }
    }
  }
  return std::shared_ptr<const PartitionPlanner>(std::move(planner));
}

std::optional<int> PartitionPlanner::IndexOf(uint32_t partition_id) const {
  for (size_t i = 0; i < table_.partitions.size(); ++i) {
    if (table_.partitions[i].id == partition_id) return static_cast<int>(i);
  }
  return std::nullopt;
}

bool PartitionPlanner::HasSize(int size) const {
  return size >= 1 && size <= kMaxModules && size_slot_[size] >= 0;
}

std::vector<int> PartitionPlanner::Sizes() const {
  std::vector<int> out;
  for (int size = 1; size <= kMaxModules; ++size) {
    if (size_slot_[size] >= 0) out.push_back(size);
  }
  return out;
}

CapacityLoss PartitionPlanner::Capacity(GpuMask free) const {
  CapacityLoss capacity;
  for (size_t j = 0; j < masks_.size(); ++j) {
    if ((masks_[j] & ~free) == 0) ++capacity.lost_by_size[sizes_[j]];
  }
  return capacity;
}

PartitionChoice PartitionPlanner::Evaluate(GpuMask free, int index) const {
  PartitionChoice choice;
  choice.index = index;
  choice.partition_id = table_.partitions[index].id;
  choice.modules = masks_[index];
  // Every partition still available in `free` that shares a module with the choice is lost.
  for (size_t j = 0; j < masks_.size(); ++j) {
    if ((masks_[j] & ~free) == 0 && (masks_[j] & choice.modules) != 0) {
      ++choice.loss.lost_by_size[sizes_[j]];
    }
  }
  choice.loss_key = choice.loss.Key();
  return choice;
}

std::optional<PartitionChoice> PartitionPlanner::ChooseSlow(GpuMask free, int size,
                                                            GpuMask must) const {
  std::optional<PartitionChoice> best;
  for (size_t i = 0; i < masks_.size(); ++i) {
    if (sizes_[i] != size || (masks_[i] & ~free) != 0 || (must & ~masks_[i]) != 0) continue;
    PartitionChoice candidate = Evaluate(free, static_cast<int>(i));
    if (!best || candidate.loss_key < best->loss_key) best = candidate;
  }
  return best;
}

const PartitionChoice* PartitionPlanner::Best(GpuMask free, int size) const {
  if (!HasSize(size)) return nullptr;
  free &= all_modules();
  if (!precomputed_.empty()) {
    const PartitionChoice& choice = precomputed_[free * slot_count_ + size_slot_[size]];
    return choice.index >= 0 ? &choice : nullptr;
  }
  // Large boards: computed per call; a thread-local slot keeps the pointer valid until the next
  // call on this thread.
  thread_local PartitionChoice slot;
  auto best = ChooseSlow(free, size, 0);
  if (!best) return nullptr;
  slot = *best;
  return &slot;
}

Result<PartitionChoice> PartitionPlanner::Choose(GpuMask free, int size, GpuMask must) const {
  if (!HasSize(size)) {
    return FailedPrecondition("no fabric partition of " + table_.board + " has " +
                              std::to_string(size) + " GPU" + (size == 1 ? "" : "s") +
                              " (partition sizes: " + SizeList(Sizes()) +
                              "); in partition mode only whole partitions can be given");
  }
  free &= all_modules();
  if ((must & ~free) != 0) {
    return InvalidArgument("required modules " + MaskToString(must & ~free) +
                           " are not free (free: " + MaskToString(free) + ")");
  }
  if (MaskSize(must) > size) {
    return InvalidArgument("required modules " + MaskToString(must) + " are more than the " +
                           std::to_string(size) + " GPUs asked for");
  }
  std::optional<PartitionChoice> best;
  if (must == 0 && !precomputed_.empty()) {
    const PartitionChoice* choice = Best(free, size);
    if (choice) best = *choice;
  } else {
    best = ChooseSlow(free, size, must);
  }
  if (!best) {
    std::string message =
        "no inactive partition of " + std::to_string(size) + " GPUs has all its GPUs free";
    if (must) message += " and contains modules " + MaskToString(must);
    return NotFound(message + " (free modules: " + MaskToString(free) + ")");
  }
  return *best;
}

int PartitionPlanner::FirstFit(GpuMask free, int size) const {
  for (size_t i = 0; i < masks_.size(); ++i) {
    if (sizes_[i] == size && (masks_[i] & ~free) == 0) return static_cast<int>(i);
  }
  return -1;
}

// --- ActivationState -------------------------------------------------------------------------

ActivationState::ActivationState(std::shared_ptr<const PartitionPlanner> planner)
    : planner_(std::move(planner)), active_(planner_->partition_count(), false) {}

Status ActivationState::Activate(uint32_t partition_id) {
  auto index = planner_->IndexOf(partition_id);
  if (!index) return NotFound("partition " + std::to_string(partition_id) + ": not in the table");
  if (active_[*index]) {
    return FailedPrecondition("partition " + std::to_string(partition_id) + " is already active");
  }
  GpuMask mask = planner_->partition_mask(*index);
  if (mask & busy_) {
    for (int j = 0; j < planner_->partition_count(); ++j) {
      GpuMask shared = planner_->partition_mask(j) & mask;
      if (active_[j] && shared) {
        return FailedPrecondition("partition " + std::to_string(partition_id) + " " +
                                  MaskToString(mask) + " overlaps active partition " +
                                  std::to_string(planner_->table().partitions[j].id) + " " +
                                  MaskToString(planner_->partition_mask(j)) + " on modules " +
                                  MaskToString(shared));
      }
    }
  }
  active_[*index] = true;
  busy_ |= mask;
  return Ok();
}

Status ActivationState::Deactivate(uint32_t partition_id) {
  auto index = planner_->IndexOf(partition_id);
  if (!index) return NotFound("partition " + std::to_string(partition_id) + ": not in the table");
  if (!active_[*index]) {
    return FailedPrecondition("partition " + std::to_string(partition_id) + " is not active");
  }
  active_[*index] = false;
  busy_ &= ~planner_->partition_mask(*index);
  return Ok();
}

Status ActivationState::SetActive(const std::vector<uint32_t>& partition_ids) {
  ActivationState next(planner_);
  for (uint32_t id : partition_ids) {
    if (auto status = next.Activate(id); !status) return status.error();
  }
  *this = std::move(next);
  return Ok();
}

bool ActivationState::IsActive(uint32_t partition_id) const {
  auto index = planner_->IndexOf(partition_id);
  return index && active_[*index];
}

std::vector<uint32_t> ActivationState::Active() const {
  std::vector<uint32_t> out;
  for (int i = 0; i < planner_->partition_count(); ++i) {
    if (active_[i]) out.push_back(planner_->table().partitions[i].id);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace tessera::topology

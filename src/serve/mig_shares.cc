#include "serve/mig_shares.h"

#include <algorithm>

#include "placement/placement.h"

namespace tessera::serve {

namespace {

// Whether the parent GPU lets new shares onto its slices now.
bool ParentOpen(const fleet::GpuRecord& gpu) {
  return gpu.mig_enabled && gpu.available && gpu.node.empty() && !gpu.drain_requested &&
         !gpu.quarantine_requested &&
         (gpu.state == fleet::LeaseState::kFree || gpu.state == fleet::LeaseState::kReserved ||
          gpu.state == fleet::LeaseState::kActive);
}

}  // namespace

uint64_t SliceMemory(const fleet::MigSlice& slice) {
  return slice.memory_bytes > 0 ? slice.memory_bytes
                                : sharing::MigProfileMemoryBytes(slice.profile);
}

double MigSharePart(const fleet::GpuRecord& gpu, const fleet::MigSlice& slice,
                    const sharing::Share& share) {
  return sharing::MigShareFraction(
      share, SliceMemory(slice),
      placement::MigGpuFraction(slice.compute_slices, gpu.compute_slices));
}

MigShareRooms MigShareRoomsOf(const Model& model) {
  MigShareRooms rooms;
  for (size_t i = 0; i < model.gpus.size(); ++i) {
    const fleet::GpuRecord& gpu = model.gpus[i];
    if (!gpu.mig_enabled || !gpu.node.empty()) continue;
    const bool open = ParentOpen(gpu);
    for (size_t s = 0; s < gpu.mig_slices.size(); ++s) {
      const fleet::MigSlice& slice = gpu.mig_slices[s];
      if (slice.profile.empty()) continue;
      sharing::SharedSlice room;
      room.profile = slice.profile;
      room.room.memory_bytes = SliceMemory(slice);
      for (const auto& holder : gpu.shares) {
        if (holder.mig_device != slice.id) continue;
        room.room.held.push_back(holder.share);
        if (room.room.tenancy_uid.empty()) room.room.tenancy_uid = holder.tenancy_uid;
      }
      // Free, or shared by shares still there: never one a container holds whole, one whose
      // daemon is still being torn down, or one whose daemon failed.
      const bool free = slice.container_id.empty() && !slice.shared;
      const bool shared = slice.shared && !room.room.held.empty();
      room.room.placeable =
          open && slice.share_fault.empty() && room.room.memory_bytes > 0 && (free || shared);
      rooms.slices.push_back(std::move(room));
      rooms.where.emplace_back(i, s);
    }
  }
  return rooms;
}

bool AnySliceRoom(const MigShareRooms& rooms) {
  sharing::Share least;
  least.memory_bytes = sharing::kMinShareMemory;
  least.compute_percent = 1;
  return std::any_of(rooms.slices.begin(), rooms.slices.end(), [&](const auto& slice) {
    // Any tenancy: a held slice's own tenancy could join it.
    return sharing::Fits(slice.room, least, slice.room.tenancy_uid, {0, false});
  });
}

void TakeSharedSliceLocked(fleet::GpuRecord& gpu, fleet::MigSlice& slice,
                           const fleet::ContainerRecord& container) {
  gpu.shares.push_back({container.id, container.spec.tenancy, container.tenancy_uid,
                        *container.spec.share, slice.id});
  slice.shared = true;
  if (slice.container_id.empty()) {
    slice.container_id = container.id;
    slice.tenancy = container.spec.tenancy;
  }
}

std::map<std::string, std::string> FirstPendingMigSharesLocked(const Model& model) {
  std::map<std::string, std::string> out;
  for (const auto& id : model.share_pending) {
    auto it = model.containers.find(id);
    if (it == model.containers.end()) continue;
    const fleet::ContainerRecord& container = it->second;
    if (container.state != fleet::ContainerState::kPending || container.started ||
        !container.spec.share || container.spec.share->mig_profile.empty())
      continue;
    out.emplace(container.spec.share->mig_profile, container.id);
  }
  return out;
}

void AskForMigSharesLocked(Model& model) {
  if (!model.options.mig_shaper || FirstPendingMigSharesLocked(model).empty()) return;
  model.mig_demand_due = true;
  model.mig_demand_wake.notify_all();
}

}  // namespace tessera::serve

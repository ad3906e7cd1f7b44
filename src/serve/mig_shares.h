// Shares of a MIG slice (a share whose sharing::Share::mig_profile is set): which slices take
// shares, what a share there is counted as, and what the share pass does when it places one.
//
// A free slice of the profile becomes a shared slice when the first share takes it: the slice
// names one of its shares (MigSlice::container_id, so a whole-slice MIG request never takes it)
// and MigSlice::shared is set; further shares of the same tenancy join it while its memory (less
// the reserve) and compute last, as on a shared GPU. When its last share leaves it stays shared,
// taken by nothing, until SharedGpus tore its MPS daemon down; then it is free again.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "serve/model.h"
#include "sharing/sharing.h"

namespace tessera::serve {

// The memory a share counts a slice as holding: NVML's figure, else its profile's name's.
uint64_t SliceMemory(const fleet::MigSlice& slice);

// What a share on `slice` of `gpu` is metered and counted as: its fraction of the slice times
// the slice's fraction of the GPU.
double MigSharePart(const fleet::GpuRecord& gpu, const fleet::MigSlice& slice,
                    const sharing::Share& share);

// The slices of this host's GPUs in MIG mode as share placement sees them (mu held).
struct MigShareRooms {
  std::vector<sharing::SharedSlice> slices;
  std::vector<std::pair<size_t, size_t>> where;  // (index into model.gpus, into its mig_slices)
};
MigShareRooms MigShareRoomsOf(const Model& model);
// Whether any slice there could take the smallest share there can be.
bool AnySliceRoom(const MigShareRooms& rooms);

// mu held: the share `container` (placed on slice `slice` of `gpu`) takes its room there.
void TakeSharedSliceLocked(fleet::GpuRecord& gpu, fleet::MigSlice& slice,
                           const fleet::ContainerRecord& container);

// Per MIG profile, the first (in submission order) pending share of a MIG slice that waits for
// it (mu held): what MIG by demand makes slices for, one at a time per profile.
std::map<std::string, std::string> FirstPendingMigSharesLocked(const Model& model);
// mu held: when shares of MIG slices still wait and MIG by demand is on, it is asked to decide.
void AskForMigSharesLocked(Model& model);

}  // namespace tessera::serve

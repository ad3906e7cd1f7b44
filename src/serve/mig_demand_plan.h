// MIG by demand, the decision (pure): which waiting MIG requests the free slices cannot serve,
// which instance to make next for them (mig::ChooseInstance) and where a large request that
// fits nowhere waits (mig::ChooseReservation), from a snapshot of this host's MIG GPUs.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "mig/mig.h"

namespace tessera::serve {

// One waiting request for MIG instances, in the queue's fair order. Whatever wants a MIG
// instance (a MIG container, later a share of a MIG slice) is a want.
struct MigWant {
  std::string id;  // the container waiting
  std::string profile;
  int count = 0;
};

// One GPU in MIG mode as the decision sees it.
struct MigDemandGpu {
  std::string pci_address;
  const mig::ProfileTable* table = nullptr;  // nullptr: its board is not shaped
  bool placeable = true;                     // its lease lets new slices in, not being changed
  std::vector<mig::LiveInstance> instances;  // busy: holds a container (or was refused)
  // Its MIG devices no container holds: GPU instance ID -> profile.
  std::map<uint32_t, std::string> free_slices;
};

// Memory slices kept for one waiting request.
struct MigReservation {
  std::string id;  // the container it is kept for
  std::string profile;
  std::string pci_address;
  nvml::Placement placement;
  friend bool operator==(const MigReservation&, const MigReservation&) = default;
};

struct MigDemandDecision {
  // The instance to make next (at most one per decision), and for whom.
  std::optional<mig::ShapeChoice> step;
  std::string step_for;
  std::vector<MigReservation> reservations;  // those kept and those new
  std::map<std::string, std::string> notes;  // container ID -> what it waits for
};

// The decision for `wants` (fair order) on `gpus`. `held`: the reservations of the last decision;
// one is kept while its request waits and busy instances still lie in it, or while its GPU does
// not let slices in (once they are gone its request comes first). Only the first request of a
// profile that cannot be served reserves, and at most `max_reservations` are held.
MigDemandDecision DecideMigDemand(const std::vector<MigDemandGpu>& gpus,
                                  const std::vector<MigWant>& wants,
                                  const std::vector<MigReservation>& held, size_t max_reservations);

// Whether GPU instance `gpu_instance_id` of `gpu` lies in one of `reservations` (its slice is then
// handed to nobody while the reservation is held).
bool InReservation(const std::vector<MigReservation>& reservations, const std::string& pci_address,
                   const std::vector<mig::LiveInstance>& instances, uint32_t gpu_instance_id);

}  // namespace tessera::serve

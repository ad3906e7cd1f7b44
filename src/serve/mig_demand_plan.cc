// MIG by demand, the decision (pure). A few GPUs, a few dozen placements each: the decision is a
// walk over the waiting requests with a handful of mig::ChooseInstance calls.
#include "serve/mig_demand_plan.h"

#include <algorithm>
#include <set>

namespace tessera::serve {
namespace {

std::optional<size_t> DemandGpuIndex(const std::vector<MigDemandGpu>& gpus,
                                     const std::string& pci_address) {
  for (size_t i = 0; i < gpus.size(); ++i)
    if (gpus[i].pci_address == pci_address) return i;
  return std::nullopt;
}

bool BusyWithin(const MigDemandGpu& gpu, const nvml::Placement& where) {
  return std::any_of(gpu.instances.begin(), gpu.instances.end(), [&](const auto& instance) {
    return instance.busy && mig::Overlaps(instance.placement, where);
  });
}

std::string SlicesText(const nvml::Placement& where) {
  return std::to_string(where.start) + "-" + std::to_string(where.start + where.size - 1);
}

std::string KeptNote(const MigReservation& reservation) {
  return "memory slices " + SlicesText(reservation.placement) + " of GPU " +
         reservation.pci_address + " are kept for it until the work there ends";
}

// The step changes the shape the rest of the decision sees: the destroyed instances are gone
// and no reservation may cover the new one.
void TakeStep(mig::ShapeGpu& gpu, const mig::ShapeStep& step) {
  auto& instances = gpu.instances;
  instances.erase(std::remove_if(instances.begin(), instances.end(),
                                 [&](const auto& instance) {
                                   return std::find(step.destroy.begin(), step.destroy.end(),
                                                    instance.gpu_instance_id) != step.destroy.end();
                                 }),
                  instances.end());
  gpu.reserved.push_back(step.create.placement);
}

// Idle instances of the profile a request wants are what it takes: never destroyed to make
// another of the same profile (that would only churn).
void KeepFreeOfProfile(const std::vector<MigDemandGpu>& gpus, const std::string& profile,
                       std::vector<mig::ShapeGpu>& trial) {
  for (size_t i = 0; i < gpus.size(); ++i)
    for (auto& instance : trial[i].instances) {
      auto free = gpus[i].free_slices.find(instance.gpu_instance_id);
      if (free != gpus[i].free_slices.end() && free->second == profile) instance.busy = true;
    }
}

// The reservations still held: their requests wait and busy instances still lie in them. The
// requests of those whose busy work ended go into `cleared`.
void KeepReservations(const std::vector<MigDemandGpu>& gpus, const std::vector<MigWant>& wants,
                      const std::vector<MigReservation>& held, std::vector<mig::ShapeGpu>& shape,
                      MigDemandDecision& out, std::set<std::string>& cleared) {
  std::set<std::string> waiting;
  for (const auto& want : wants)
    waiting.insert(want.id);
  for (const auto& reservation : held) {
    auto gpu = DemandGpuIndex(gpus, reservation.pci_address);
    if (!waiting.count(reservation.id) || !gpu) continue;
    // A GPU being checked or changed keeps its reservations until it lets slices in again.
    if (gpus[*gpu].placeable && !BusyWithin(gpus[*gpu], reservation.placement)) {
      cleared.insert(reservation.id);
      continue;
    }
    out.reservations.push_back(reservation);
    shape[*gpu].reserved.push_back(reservation.placement);
  }
}

// Free slices outside every reservation, by profile: (GPU, GPU instance ID) each.
using FreeSlices = std::map<std::string, std::vector<std::pair<size_t, uint32_t>>>;
FreeSlices FreeOutsideReservations(const std::vector<MigDemandGpu>& gpus,
                                   const std::vector<MigReservation>& kept) {
  FreeSlices free;
  for (size_t i = 0; i < gpus.size(); ++i) {
    if (!gpus[i].placeable) continue;
    for (const auto& [gpu_instance_id, profile] : gpus[i].free_slices)
      if (!InReservation(kept, gpus[i].pci_address, gpus[i].instances, gpu_instance_id))
        free[profile].push_back({i, gpu_instance_id});
  }
  return free;
}

// A request takes `count` free slices (at most those there are): no later decision step
// destroys them.
void TakeFree(std::vector<std::pair<size_t, uint32_t>>& free, int count,
              std::vector<mig::ShapeGpu>& shape) {
  for (; count > 0 && !free.empty(); --count) {
    auto [gpu, gpu_instance_id] = free.back();
    free.pop_back();
    for (auto& instance : shape[gpu].instances)
      if (instance.gpu_instance_id == gpu_instance_id) instance.busy = true;
  }
}

// A new reservation: the free slices in it serve no later request.
void HandOutNoneWithin(const std::vector<MigDemandGpu>& gpus, const MigReservation& reservation,
                       FreeSlices& free) {
  for (auto& [profile, slices] : free)
    slices.erase(std::remove_if(slices.begin(), slices.end(),
                                [&](const auto& slice) {
                                  const MigDemandGpu& gpu = gpus[slice.first];
                                  return InReservation({reservation}, gpu.pci_address,
                                                       gpu.instances, slice.second);
                                }),
                 slices.end());
}

// A request the free slices cannot serve and no instance is made for now: where it waits.
void ReserveFor(const MigWant& want, const std::vector<MigDemandGpu>& gpus,
                std::vector<mig::ShapeGpu>& shape, size_t max_reservations,
                std::set<std::string>& reserving, bool none_free, MigDemandDecision& out) {
  std::vector<mig::ShapeGpu> trial = shape;
  KeepFreeOfProfile(gpus, want.profile, trial);
  if (mig::ChooseInstance(trial, want.profile)) {
    out.notes[want.id] = "a " + want.profile + " instance is made after the one being made now";
    return;
  }
  // Only a request no free slice of its profile serves at all keeps memory slices.
  if (!none_free || reserving.count(want.profile) || out.reservations.size() >= max_reservations) {
    out.notes[want.id] =
        "no room to make a " + want.profile + " instance: busy ones are in the way";
    return;
  }
  auto chosen = mig::ChooseReservation(shape, want.profile);
  if (!chosen) {
    out.notes[want.id] = "no GPU here can make a " + want.profile + " instance";
    return;
  }
  MigReservation reservation{want.id, want.profile, gpus[chosen->gpu].pci_address,
                             chosen->placement};
  shape[chosen->gpu].reserved.push_back(chosen->placement);
  reserving.insert(want.profile);
  out.notes[want.id] = KeptNote(reservation);
  out.reservations.push_back(std::move(reservation));
}

}  // namespace

bool InReservation(const std::vector<MigReservation>& reservations, const std::string& pci_address,
                   const std::vector<mig::LiveInstance>& instances, uint32_t gpu_instance_id) {
  auto instance = std::find_if(instances.begin(), instances.end(), [&](const auto& candidate) {
    return candidate.gpu_instance_id == gpu_instance_id;
  });
  if (instance == instances.end()) return false;
  return std::any_of(reservations.begin(), reservations.end(), [&](const auto& reservation) {
    return reservation.pci_address == pci_address &&
           mig::Overlaps(reservation.placement, instance->placement);
  });
}

MigDemandDecision DecideMigDemand(const std::vector<MigDemandGpu>& gpus,
                                  const std::vector<MigWant>& wants,
                                  const std::vector<MigReservation>& held,
                                  size_t max_reservations) {
  MigDemandDecision out;
  std::vector<mig::ShapeGpu> shape(gpus.size());
  for (size_t i = 0; i < gpus.size(); ++i) {
    shape[i].table = gpus[i].table;
    shape[i].instances = gpus[i].instances;
    shape[i].placeable = gpus[i].placeable;
  }
  std::set<std::string> cleared;
  KeepReservations(gpus, wants, held, shape, out, cleared);
  // Requests whose reserved slices emptied come first: they waited for exactly this.
  std::vector<const MigWant*> order;
  for (const auto& want : wants)
    if (cleared.count(want.id)) order.push_back(&want);
  for (const auto& want : wants)
    if (!cleared.count(want.id)) order.push_back(&want);

  FreeSlices free = FreeOutsideReservations(gpus, out.reservations);
  std::set<std::string> reserving;
  for (const auto& reservation : out.reservations)
    reserving.insert(reservation.profile);
  for (const MigWant* want : order) {
    auto& have = free[want->profile];
    const bool enough = static_cast<int>(have.size()) >= want->count, none_free = have.empty();
    TakeFree(have, want->count, shape);
    if (enough) continue;
    auto own = std::find_if(out.reservations.begin(), out.reservations.end(),
                            [&](const auto& reservation) { return reservation.id == want->id; });
    const bool reserved = own != out.reservations.end();
    if (!out.step) {
      std::vector<mig::ShapeGpu> trial = shape;
      if (reserved) {
        auto& kept = trial[*DemandGpuIndex(gpus, own->pci_address)].reserved;
        kept.erase(std::find(kept.begin(), kept.end(), own->placement));
      }
      KeepFreeOfProfile(gpus, want->profile, trial);
      if (auto choice = mig::ChooseInstance(trial, want->profile)) {
        if (reserved) {  // served now: its reservation goes
          shape = std::move(trial);
          out.reservations.erase(own);
        }
        TakeStep(shape[choice->gpu], choice->step);
        out.notes[want->id] = "a " + want->profile + " instance is being made on GPU " +
                              gpus[choice->gpu].pci_address;
        out.step = std::move(choice);
        out.step_for = want->id;
        continue;
      }
    }
    if (reserved) {
      out.notes[want->id] = KeptNote(*own);
      continue;
    }
    const size_t before = out.reservations.size();
    ReserveFor(*want, gpus, shape, max_reservations, reserving, none_free, out);
    if (out.reservations.size() > before) HandOutNoneWithin(gpus, out.reservations.back(), free);
  }
  return out;
}

}  // namespace tessera::serve

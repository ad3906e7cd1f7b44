// The scheduler's MIG pass: pending MIG containers take free slices of their profile on GPUs in
// MIG mode, under the parent GPU's lease.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <deque>
#include <map>

#include "serve/queue.h"
#include "serve/record_names.h"
#include "serve/request_order.h"
#include "serve/scheduler.h"

namespace tessera::serve {

namespace {

// The GPUs in MIG mode as slice packing sees them, with each one's index into the model's GPUs.
struct MigParents {
  std::vector<placement::MigParent> parents;
  std::vector<size_t> gpu;  // index into model.gpus per parent
};

MigParents MigParentsOf(const Model& model) {
  MigParents out;
  for (size_t i = 0; i < model.gpus.size(); ++i) {
    const GpuRecord& gpu = model.gpus[i];
    if (!gpu.mig_enabled || !gpu.available) continue;
    placement::MigParent parent;
    parent.compute_slices = gpu.compute_slices;
    parent.placeable = (gpu.state == LeaseState::kFree || gpu.state == LeaseState::kReserved ||
                        gpu.state == LeaseState::kActive) &&
                       !gpu.drain_requested && !gpu.quarantine_requested &&
                       !model.mig_reshaping.count(gpu.pci_address);
    // A slice shares hold (or whose shares' MPS daemon is still being torn down) is not free,
    // nor one in memory slices kept for a large request.
    static const std::vector<mig::LiveInstance> kNone;
    auto known = model.mig_instances.find(gpu.pci_address);
    const auto& instances = known != model.mig_instances.end() ? known->second : kNone;
    for (const auto& slice : gpu.mig_slices)
      parent.slots.push_back({slice.profile, slice.compute_slices,
                              slice.container_id.empty() && !slice.shared &&
                                  !slice.profile.empty() &&
                                  !InReservation(model.mig_reservations, gpu.pci_address, instances,
                                                 slice.gpu_instance_id)});
    out.parents.push_back(std::move(parent));
    out.gpu.push_back(i);
  }
  return out;
}

bool AnyMigSliceFree(const std::vector<placement::MigParent>& parents) {
  return std::any_of(parents.begin(), parents.end(), [](const auto& parent) {
    return parent.placeable && std::any_of(parent.slots.begin(), parent.slots.end(),
                                           [](const auto& slot) { return slot.free; });
  });
}

// The MIG containers that still wait to be placed (mu held).
std::vector<ContainerRecord*> PendingMigLocked(Model& model) {
  std::vector<ContainerRecord*> pending;
  for (const auto& id : model.mig_pending) {
    auto it = model.containers.find(id);
    if (it == model.containers.end() || it->second.state != ContainerState::kPending ||
        it->second.started || it->second.spec.mig.count == 0)
      continue;
    pending.push_back(&it->second);
  }
  return pending;
}

// The slices one MIG request would take and the GPUs they count as; a non-empty reason when it
// waits instead.
struct MigPick {
  std::vector<placement::MigChoice> slices;
  double share = 0;
  std::string reason;
};

// A pass only takes slices: a request for a profile and count that did not fit earlier in it
// does not fit later either, and is not packed again (`unfit` keeps its reason until a
// placement). `in_use`: GPUs each tenancy incarnation holds, whole and slices, for its quota.
MigPick PickMigSlices(const Model& model, const std::vector<placement::MigParent>& parents,
                      const ContainerRecord& container,
                      std::map<std::pair<std::string, int>, std::string>& unfit,
                      std::map<std::string, double>& in_use) {
  const std::string key = QueueTenancy(container);
  MigPick pick;
  const std::pair<std::string, int> shape{container.spec.mig.profile, container.spec.mig.count};
  auto known = unfit.find(shape);
  auto chosen = known != unfit.end()
                    ? Result<std::vector<placement::MigChoice>>(FailedPrecondition(known->second))
                    : placement::PackMigSlices(parents, shape.first, shape.second);
  if (!chosen && known == unfit.end()) unfit.emplace(shape, chosen.error().message);
  if (!chosen) {
    pick.reason =
        "waiting: MIG devices " + container.spec.mig.profile + ": " + chosen.error().message;
    // What MIG by demand does about it.
    if (auto note = model.mig_demand_notes.find(container.id); note != model.mig_demand_notes.end())
      pick.reason += "; " + note->second;
    return pick;
  }
  for (const auto& choice : *chosen) {
    const auto& parent = parents[choice.parent];
    pick.share +=
        placement::MigGpuFraction(parent.slots[choice.slot].compute_slices, parent.compute_slices);
  }
  const int quota = model.queue->GetTenancy(key).quota_gpus;
  if (quota != scheduling::kUnlimited && in_use[key] + pick.share > quota + 1e-9)
    pick.reason = QuotaWaitReason(in_use[key], quota);
  pick.slices = std::move(*chosen);
  return pick;
}

// A waiting MIG request's entry in the queue report.
QueueEntry MigWaitEntry(const ContainerRecord& container, int position, std::string reason) {
  QueueEntry entry;
  entry.id = container.id;
  entry.tenancy = container.spec.tenancy;
  entry.tenancy_uid = container.tenancy_uid;
  entry.mig = container.spec.mig;
  entry.priority = container.spec.priority;
  entry.position = position;
  entry.reason = std::move(reason);
  entry.created_ms = container.created_ms;
  return entry;
}

// mu held: the container takes the picked slices (the first slice on a GPU leases it whole).
void LeaseMigSlicesLocked(Model& model, const std::vector<size_t>& parent_gpu,
                          ContainerRecord& container, const MigPick& pick,
                          std::vector<Mutation>& out) {
  const std::string& tenancy = container.spec.tenancy;
  container.gpus.clear();
  container.mig_devices.clear();
  for (const auto& choice : pick.slices) {
    GpuRecord& gpu = model.gpus[parent_gpu[choice.parent]];
    fleet::MigSlice& slice = gpu.mig_slices[choice.slot];
    slice.container_id = container.id;
    slice.tenancy = tenancy;
    container.mig_devices.push_back(slice.id);
    if (std::find(container.gpus.begin(), container.gpus.end(), gpu.id()) == container.gpus.end()) {
      container.gpus.push_back(gpu.id());
      if (gpu.state == LeaseState::kFree) {
        // The first slice leases the whole GPU; the last one's release checks it.
        gpu.tenancy = tenancy;
        gpu.container_id = container.id;
        model.SetGpuState(gpu, LeaseState::kReserved, "", out);
      }
    }
  }
  model.MigLeftWaiting(container);
  container.mig_gpus = pick.share;
  model.AddMigUse(QueueTenancy(container), pick.share);
  container.started = true;
  container.reason.clear();
  const double waited = static_cast<double>(fleet::NowMs() - container.created_ms) / 1000.0;
  model.meter.ObserveWait(container.tenancy_uid, tenancy, waited);
  spdlog::info("container {}: placed ({} MIG devices {} of tenancy {}, {:.3f} GPUs) after {:.3f} s",
               container.id, container.mig_devices.size(), container.spec.mig.profile, tenancy,
               pick.share, waited);
  out.push_back(container);
}

// MIG requests still wait after a pass: MIG by demand, when on, decides what to make for them.
void AskForMigDemandLocked(Model& model) {
  if (!model.options.mig_shaper) return;
  model.mig_demand_due = true;
  model.mig_demand_wake.notify_all();
}

}  // namespace

void Scheduler::PlaceMigLocked(std::vector<Mutation>* out, std::vector<std::string>* to_start,
                               std::vector<QueueEntry>* waiting) {
  // Without `out` nothing is placed: the walk only says what would wait, and why (the queue
  // report's MIG part).
  const bool dry = out == nullptr;
  if (model_.mig_pending.empty()) return;
  MigParents parents = MigParentsOf(model_);
  // No slice free anywhere: none of them can start, and none is tried.
  if (!dry && !AnyMigSliceFree(parents.parents)) {
    model_.DropStalePending(model_.mig_pending, model_.mig_waiting);
    AskForMigDemandLocked(model_);
    return;
  }
  // Requests for different profiles or sizes never block each other: whatever fits starts.
  RequestOrder order(PendingMigLocked(model_), *model_.queue);
  std::map<std::string, double> in_use;
  for (const auto& usage : model_.queue->Usage())
    in_use[usage.name] = usage.in_use + usage.other_gpus;

  std::map<std::pair<std::string, int>, std::string> unfit;
  std::deque<std::string> still;
  while (ContainerRecord* container = order.Next()) {
    MigPick pick = PickMigSlices(model_, parents.parents, *container, unfit, in_use);
    if (!pick.reason.empty()) {
      still.push_back(container->id);
      if (waiting)
        waiting->push_back(MigWaitEntry(*container, static_cast<int>(waiting->size()) + 1,
                                        std::move(pick.reason)));
      continue;
    }
    for (const auto& choice : pick.slices)
      parents.parents[choice.parent].slots[choice.slot].free = false;
    unfit.clear();
    in_use[QueueTenancy(*container)] += pick.share;
    order.Placed(pick.share);
    if (dry) continue;
    if (may_place_ && !may_place_()) return;
    LeaseMigSlicesLocked(model_, parents.gpu, *container, pick, *out);
    to_start->push_back(container->id);
  }
  if (dry) return;
  // Those still waiting, in submission order.
  model_.SortBySubmission(still);
  model_.mig_pending = std::move(still);
  if (!model_.mig_pending.empty()) AskForMigDemandLocked(model_);
}

}  // namespace tessera::serve

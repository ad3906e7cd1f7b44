// The scheduler's MIG pass: pending MIG containers take free slices of their profile on GPUs in
// MIG mode, under the parent GPU's lease.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <deque>
#include <map>

#include "serve/queue.h"
#include "serve/request_order.h"
#include "serve/scheduler.h"

namespace tessera::serve {

using fleet::ContainerRecord;
using fleet::ContainerState;
using fleet::GpuRecord;
using fleet::LeaseState;
using fleet::Mutation;

void Scheduler::PlaceMigLocked(std::vector<Mutation>* out, std::vector<std::string>* to_start,
                               std::vector<QueueEntry>* waiting) {
  // Without `out` nothing is placed: the walk only says what would wait, and why (the queue
  // report's MIG part).
  const bool dry = out == nullptr;
  if (model_.mig_pending.empty()) return;
  std::vector<size_t> parent_gpu;  // index into model_.gpus per MigParent
  std::vector<placement::MigParent> parents;
  for (size_t i = 0; i < model_.gpus.size(); ++i) {
    const GpuRecord& gpu = model_.gpus[i];
    if (!gpu.mig_enabled || !gpu.available) continue;
    placement::MigParent parent;
    parent.compute_slices = gpu.compute_slices;
    parent.placeable = (gpu.state == LeaseState::kFree || gpu.state == LeaseState::kReserved ||
                        gpu.state == LeaseState::kActive) &&
                       !gpu.drain_requested && !gpu.quarantine_requested;
    for (const auto& slice : gpu.mig_slices)
      parent.slots.push_back({slice.profile, slice.compute_slices,
                              slice.container_id.empty() && !slice.profile.empty()});
    parents.push_back(std::move(parent));
    parent_gpu.push_back(i);
  }
  // No slice free anywhere: none of them can start, and none is tried.
  const bool any_free = std::any_of(parents.begin(), parents.end(), [](const auto& parent) {
    return parent.placeable && std::any_of(parent.slots.begin(), parent.slots.end(),
                                           [](const auto& slot) { return slot.free; });
  });
  if (!dry && !any_free) {
    model_.DropStalePending(model_.mig_pending, model_.mig_waiting);
    return;
  }
  std::vector<ContainerRecord*> pending;
  for (const auto& id : model_.mig_pending) {
    auto it = model_.containers.find(id);
    if (it == model_.containers.end() || it->second.state != ContainerState::kPending ||
        it->second.started || it->second.spec.mig.count == 0)
      continue;
    pending.push_back(&it->second);
  }
  // Requests for different profiles or sizes never block each other: whatever fits starts.
  RequestOrder order(std::move(pending), *model_.queue);
  // GPUs each tenancy incarnation holds, whole and slices, for its GPU quota.
  std::map<std::string, double> in_use;
  for (const auto& usage : model_.queue->Usage())
    in_use[usage.name] = usage.in_use + usage.other_gpus;

  // A pass only takes slices: a request for a profile and count that did not fit earlier in it
  // does not fit later either, and is not packed again (its reason is kept until a placement).
  std::map<std::pair<std::string, int>, std::string> unfit;
  std::deque<std::string> still;
  while (ContainerRecord* container = order.Next()) {
    const std::string& tenancy = container->spec.tenancy;
    const std::string key = QueueTenancy(*container);
    std::string reason;
    const std::pair<std::string, int> shape{container->spec.mig.profile, container->spec.mig.count};
    auto known = unfit.find(shape);
    auto chosen = known != unfit.end()
                      ? Result<std::vector<placement::MigChoice>>(FailedPrecondition(known->second))
                      : placement::PackMigSlices(parents, shape.first, shape.second);
    if (!chosen && known == unfit.end()) unfit.emplace(shape, chosen.error().message);
    double share = 0;
    if (chosen) {
      for (const auto& choice : *chosen) {
        const auto& parent = parents[choice.parent];
        share += placement::MigGpuFraction(parent.slots[choice.slot].compute_slices,
                                           parent.compute_slices);
      }
      const int quota = model_.queue->GetTenancy(key).quota_gpus;
      if (quota != scheduling::kUnlimited && in_use[key] + share > quota + 1e-9)
        reason = QuotaWaitReason(in_use[key], quota);
    } else {
      reason =
          "waiting: MIG devices " + container->spec.mig.profile + ": " + chosen.error().message;
    }
    if (!reason.empty()) {
      still.push_back(container->id);
      if (waiting) {
        QueueEntry entry;
        entry.id = container->id;
        entry.tenancy = tenancy;
        entry.tenancy_uid = container->tenancy_uid;
        entry.mig = container->spec.mig;
        entry.priority = container->spec.priority;
        entry.position = static_cast<int>(waiting->size()) + 1;
        entry.reason = std::move(reason);
        entry.created_ms = container->created_ms;
        waiting->push_back(std::move(entry));
      }
      continue;
    }
    for (const auto& choice : *chosen)
      parents[choice.parent].slots[choice.slot].free = false;
    unfit.clear();
    in_use[key] += share;
    order.Placed(share);
    if (dry) continue;
    if (may_place_ && !may_place_()) return;
    container->gpus.clear();
    container->mig_devices.clear();
    for (const auto& choice : *chosen) {
      GpuRecord& gpu = model_.gpus[parent_gpu[choice.parent]];
      fleet::MigSlice& slice = gpu.mig_slices[choice.slot];
      slice.container_id = container->id;
      slice.tenancy = tenancy;
      container->mig_devices.push_back(slice.id);
      if (std::find(container->gpus.begin(), container->gpus.end(), gpu.id()) ==
          container->gpus.end()) {
        container->gpus.push_back(gpu.id());
        if (gpu.state == LeaseState::kFree) {
          // The first slice leases the whole GPU; the last one's release checks it.
          gpu.tenancy = tenancy;
          gpu.container_id = container->id;
          model_.SetGpuState(gpu, LeaseState::kReserved, "", *out);
        }
      }
    }
    model_.MigLeftWaiting(*container);
    container->mig_gpus = share;
    model_.AddMigUse(key, share);
    container->started = true;
    container->reason.clear();
    const double waited = static_cast<double>(fleet::NowMs() - container->created_ms) / 1000.0;
    model_.meter.ObserveWait(container->tenancy_uid, tenancy, waited);
    spdlog::info(
        "container {}: placed ({} MIG devices {} of tenancy {}, {:.3f} GPUs) after {:.3f} s",
        container->id, container->mig_devices.size(), container->spec.mig.profile, tenancy, share,
        waited);
    out->push_back(*container);
    to_start->push_back(container->id);
  }
  if (dry) return;
  // Those still waiting, in submission order.
  model_.SortBySubmission(still);
  model_.mig_pending = std::move(still);
}

}  // namespace tessera::serve

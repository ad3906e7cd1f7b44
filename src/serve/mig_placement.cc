// The scheduler's MIG pass: pending MIG containers take free slices of their profile on GPUs in
// MIG mode, under the parent GPU's lease.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>

#include "serve/queue.h"
#include "serve/scheduler.h"

namespace tessera::serve {

using fleet::ContainerRecord;
using fleet::ContainerState;
using fleet::GpuRecord;
using fleet::LeaseState;
using fleet::Mutation;

namespace {

// Whole GPUs as integers; with MIG slices in use, to three decimals (as the queue's reasons).
std::string GpuCountText(double gpus) {
  if (gpus == std::floor(gpus)) return std::to_string(static_cast<int64_t>(gpus));
  return fmt::format("{:.3f}", gpus);
}

// The order MIG requests are tried in. Fair: a merge of the tenancies' own lists (priority, then
// submission) that always takes the tenancy with the lowest (recent GPU usage + GPUs in use,
// slices included, + what this pass has placed for it) / weight, as the queue orders whole-GPU
// requests. FIFO: priority, then submission.
class MigOrder {
 public:
  MigOrder(std::vector<ContainerRecord*> pending, const scheduling::Scheduler& queue) {
    fair_ = queue.options().mode == scheduling::Mode::kFair;
    std::stable_sort(pending.begin(), pending.end(), [](const auto* a, const auto* b) {
      return a->spec.priority > b->spec.priority;
    });
    if (!fair_) {
      fifo_ = std::move(pending);
      return;
    }
    std::map<std::string, size_t> index;
    for (const auto& usage : queue.Usage()) {
      index[usage.name] = lists_.size();
      lists_.push_back({(usage.recent_gpus + usage.in_use + usage.other_gpus) / usage.weight,
                        usage.weight,
                        0,
                        {}});
    }
    for (ContainerRecord* container : pending) {
      auto it = index.find(QueueTenancy(*container));
      if (it == index.end()) {
        it = index.emplace(QueueTenancy(*container), lists_.size()).first;
        lists_.push_back({0, 1, 0, {}});
      }
      lists_[it->second].requests.push_back(container);
    }
  }

  // The next request to try; null when none is left.
  ContainerRecord* Next() {
    if (!fair_) return next_ < fifo_.size() ? fifo_[next_++] : nullptr;
    List* best = nullptr;
    for (auto& list : lists_)
      if (list.next < list.requests.size() && (!best || list.key < best->key)) best = &list;
    if (!best) return nullptr;
    current_ = best;
    return best->requests[best->next++];
  }
  // The request Next() gave was placed, holding `gpus`.
  void Placed(double gpus) {
    if (fair_ && current_) current_->key += gpus / current_->weight;
  }

 private:
  struct List {
    double key = 0;
    double weight = 1;
    size_t next = 0;
    std::vector<ContainerRecord*> requests;
  };
  bool fair_ = true;
  std::vector<ContainerRecord*> fifo_;
  size_t next_ = 0;
  std::vector<List> lists_;
  List* current_ = nullptr;
};

}  // namespace

void Scheduler::PlaceMigLocked(std::vector<Mutation>* out, std::vector<std::string>* to_start,
                               std::vector<QueueEntry>* waiting) {
  // Without `out` nothing is placed: the walk only says what would wait, and why (the queue
  // report's MIG part).
  const bool dry = out == nullptr;
  if (model_.mig_pending.empty()) return;
  std::vector<ContainerRecord*> pending;
  for (const auto& id : model_.mig_pending) {
    auto it = model_.containers.find(id);
    if (it == model_.containers.end() || it->second.state != ContainerState::kPending ||
        it->second.started || it->second.spec.mig.count == 0)
      continue;
    pending.push_back(&it->second);
  }
  // Requests for different profiles or sizes never block each other: whatever fits starts.
  MigOrder order(std::move(pending), *model_.queue);
  // GPUs each tenancy incarnation holds, whole and slices, for its GPU quota.
  std::map<std::string, double> in_use;
  for (const auto& usage : model_.queue->Usage())
    in_use[usage.name] = usage.in_use + usage.other_gpus;

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
  std::deque<std::string> still;
  while (ContainerRecord* container = order.Next()) {
    const std::string& tenancy = container->spec.tenancy;
    const std::string key = QueueTenancy(*container);
    std::string reason;
    auto chosen =
        placement::PackMigSlices(parents, container->spec.mig.profile, container->spec.mig.count);
    double share = 0;
    if (chosen) {
      for (const auto& choice : *chosen) {
        const auto& parent = parents[choice.parent];
        share += placement::MigGpuFraction(parent.slots[choice.slot].compute_slices,
                                           parent.compute_slices);
      }
      const int quota = model_.queue->GetTenancy(key).quota_gpus;
      if (quota != scheduling::kUnlimited && in_use[key] + share > quota + 1e-9)
        reason = fmt::format("waiting: tenancy quota {}/{} GPUs in use", GpuCountText(in_use[key]),
                             quota);
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
  std::sort(still.begin(), still.end(), [this](const std::string& a, const std::string& b) {
    return model_.container_position.at(a) < model_.container_position.at(b);
  });
  model_.mig_pending = std::move(still);
}

}  // namespace tessera::serve

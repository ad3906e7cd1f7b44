// The scheduler's share pass: pending share containers take room on a GPU (MPS or time-sliced),
// under that GPU's lease, as MIG slices do on theirs.
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

namespace {

// One GPU as share placement sees it: open to shares while free (and not reserved for a
// waiting whole-GPU request) or already shared, with no drain, quarantine or MPS fault.
sharing::SharedGpu ShareViewOf(const GpuRecord& gpu, bool reserved_for_queue) {
  sharing::SharedGpu view;
  view.memory_bytes = gpu.memory_bytes;
  const bool open = gpu.available && !gpu.mig_enabled && gpu.node.empty() && gpu.memory_bytes > 0 &&
                    gpu.share_fault.empty() && !gpu.drain_requested && !gpu.quarantine_requested;
  const bool free = gpu.state == LeaseState::kFree && !reserved_for_queue;
  const bool shared = (gpu.state == LeaseState::kReserved || gpu.state == LeaseState::kActive) &&
                      !gpu.shares.empty();
  view.placeable = open && (free || shared);
  for (const auto& holder : gpu.shares)
    view.held.push_back(holder.share);
  if (!gpu.shares.empty()) view.tenancy_uid = gpu.shares.front().tenancy_uid;
  return view;
}

}  // namespace

void Scheduler::PlaceSharesLocked(std::vector<Mutation>* out, std::vector<std::string>* to_start,
                                  std::vector<QueueEntry>* waiting) {
  // Without `out` nothing is placed: the walk only says what would wait, and why (the queue
  // report's share part).
  const bool dry = out == nullptr;
  if (model_.share_pending.empty()) return;
  std::vector<ContainerRecord*> pending;
  for (const auto& id : model_.share_pending) {
    auto it = model_.containers.find(id);
    if (it == model_.containers.end() || it->second.state != ContainerState::kPending ||
        it->second.started || !it->second.spec.share)
      continue;
    pending.push_back(&it->second);
  }
  RequestOrder order(std::move(pending), *model_.queue);
  // GPUs each tenancy incarnation holds, whole, slices and shares, for its GPU quota.
  std::map<std::string, double> in_use;
  for (const auto& usage : model_.queue->Usage())
    in_use[usage.name] = usage.in_use + usage.other_gpus;

  sharing::PlacementRules rules;
  rules.reserve_bytes = model_.options.sharing.reserve_bytes;
  rules.across_tenancies = model_.options.sharing.across_tenancies;
  std::vector<sharing::SharedGpu> views;
  views.reserve(model_.gpus.size());
  for (size_t i = 0; i < model_.gpus.size(); ++i)
    views.push_back(ShareViewOf(model_.gpus[i], reserved_gpus_.count(i) > 0));

  std::deque<std::string> still;
  while (ContainerRecord* container = order.Next()) {
    const std::string& tenancy = container->spec.tenancy;
    const std::string key = QueueTenancy(*container);
    const sharing::Share& share = *container->spec.share;
    std::string reason;
    auto chosen = sharing::ChooseGpu(views, share, container->tenancy_uid, rules);
    double fraction = 0;
    if (chosen) {
      fraction = sharing::Fraction(share, model_.gpus[*chosen].memory_bytes);
      const int quota = model_.queue->GetTenancy(key).quota_gpus;
      if (quota != scheduling::kUnlimited && in_use[key] + fraction > quota + 1e-9)
        reason = QuotaWaitReason(in_use[key], quota);
    } else {
      reason = "waiting: room on a GPU: " + chosen.error().message;
    }
    if (!reason.empty()) {
      still.push_back(container->id);
      if (waiting) {
        QueueEntry entry;
        entry.id = container->id;
        entry.tenancy = tenancy;
        entry.tenancy_uid = container->tenancy_uid;
        entry.share = share;
        entry.priority = container->spec.priority;
        entry.position = static_cast<int>(waiting->size()) + 1;
        entry.reason = std::move(reason);
        entry.created_ms = container->created_ms;
        waiting->push_back(std::move(entry));
      }
      continue;
    }
    views[*chosen].held.push_back(share);
    views[*chosen].tenancy_uid = container->tenancy_uid;
    in_use[key] += fraction;
    order.Placed(fraction);
    if (dry) continue;
    if (may_place_ && !may_place_()) return;
    GpuRecord& gpu = model_.gpus[*chosen];
    gpu.shares.push_back({container->id, tenancy, container->tenancy_uid, share});
    views[*chosen].tenancy_uid = gpu.shares.front().tenancy_uid;
    if (gpu.state == LeaseState::kFree) {
      // The first share leases the whole GPU; the last one's release checks it.
      gpu.tenancy = tenancy;
      gpu.container_id = container->id;
      model_.SetGpuState(gpu, LeaseState::kReserved, "", *out);
    }
    container->gpus = {gpu.id()};
    container->share_gpus = fraction;
    container->enforcement = sharing::EnforcementName(
        sharing::EnforcementOf(share.mode, static_cast<bool>(model_.options.sharing.measure)));
    model_.ShareLeftWaiting(*container);
    model_.AddMigUse(key, fraction);
    container->started = true;
    container->reason.clear();
    const double waited = static_cast<double>(fleet::NowMs() - container->created_ms) / 1000.0;
    model_.meter.ObserveWait(container->tenancy_uid, tenancy, waited);
    spdlog::info(
        "container {}: placed (a {} share {} / {}% of GPU {}, tenancy {}, {:.3f} GPUs, "
        "enforcement {}) after {:.3f} s",
        container->id, sharing::ModeName(share.mode), sharing::FormatMemory(share.memory_bytes),
        share.compute_percent, gpu.id(), tenancy, fraction, container->enforcement, waited);
    out->push_back(*container);
    to_start->push_back(container->id);
  }
  if (dry) return;
  // Those still waiting, in submission order.
  model_.SortBySubmission(still);
  model_.share_pending = std::move(still);
}

}  // namespace tessera::serve

// The scheduler's share pass: pending share containers take room on a GPU (MPS or time-sliced),
// under that GPU's lease, as MIG slices do on theirs.
//
// A pass decides each share in O(log n) through sharing::PlacementIndex, and none at all when no
// GPU has room for any share (a pass only takes room, so nothing that waits could start). A new
// share asks for a pass only when some GPU could take it now (ShareMightStartLocked): a flood of
// shares that cannot fit runs no pass at all.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <deque>
#include <map>
#include <tuple>
#include <unordered_set>

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

sharing::PlacementRules RulesOf(const Model& model) {
  sharing::PlacementRules rules;
  rules.reserve_bytes = model.options.sharing.reserve_bytes;
  rules.across_tenancies = model.options.sharing.across_tenancies;
  return rules;
}

// The charged parts (share_gpus) of the shares `gpu` holds.
double ChargedOn(const Model& model, const GpuRecord& gpu) {
  double sum = 0;
  for (const auto& holder : gpu.shares)
    if (auto it = model.containers.find(holder.container_id); it != model.containers.end())
      sum += it->second.share_gpus;
  return sum;
}

}  // namespace

bool ShareMightStartLocked(const Model& model, const ContainerRecord& container) {
  if (!container.spec.share) return false;
  const sharing::Share& share = *container.spec.share;
  const auto rules = RulesOf(model);
  // The least it could add to its tenancy's GPUs in use: nothing on a GPU it pays whole already.
  std::optional<double> least;
  for (size_t i = 0; i < model.gpus.size(); ++i) {
    const GpuRecord& gpu = model.gpus[i];
    const sharing::SharedGpu view = ShareViewOf(gpu, model.reserved_gpus.count(i) > 0);
    if (!sharing::Fits(view, share, container.tenancy_uid, rules)) continue;
    const bool holds = !view.held.empty() && view.tenancy_uid == container.tenancy_uid;
    const double part = ChargedPart(sharing::Fraction(share, gpu.memory_bytes),
                                    ChargedOn(model, gpu), model.share_holds.whole_gpu(share.mode));
    const double use = model.share_holds.UseJoining(share.mode, holds, part);
    least = least ? std::min(*least, use) : use;
    if (*least == 0) break;
  }
  if (!least || !model.queue) return least.has_value();
  const std::string key = QueueTenancy(container);
  const int quota = model.queue->GetTenancy(key).quota_gpus;
  if (quota == scheduling::kUnlimited) return true;
  for (const auto& usage : model.queue->Usage())
    if (usage.name == key) return usage.in_use + usage.other_gpus + *least <= quota + 1e-9;
  return *least <= quota + 1e-9;
}

void Scheduler::PlaceSharesLocked(std::vector<Mutation>* out, std::vector<std::string>* to_start,
                                  std::vector<QueueEntry>* waiting) {
  // Without `out` nothing is placed: the walk only says what would wait, and why (the queue
  // report's share part).
  const bool dry = out == nullptr;
  if (model_.share_pending.empty()) return;
  const auto rules = RulesOf(model_);
  sharing::PlacementIndex index(rules);
  // The report says why each waits, which takes every GPU's view (ChooseGpu's reasons).
  std::vector<sharing::SharedGpu> views;
  if (dry) views.reserve(model_.gpus.size());
  for (size_t i = 0; i < model_.gpus.size(); ++i) {
    auto view = ShareViewOf(model_.gpus[i], model_.reserved_gpus.count(i) > 0);
    index.Set(i, view);
    if (dry) views.push_back(std::move(view));
  }
  if (!dry && !index.AnyRoom()) {
    // No GPU has room for any share: none is tried.
    model_.DropStalePending(model_.share_pending, model_.share_waiting);
    return;
  }
  std::vector<ContainerRecord*> pending;
  pending.reserve(model_.share_pending.size());
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
  // Per GPU placed on in this walk: its shares' charged parts (ChargedPart's `others`).
  std::map<size_t, double> charged;
  // The report's reasons by request shape and tenancy, until the next placement changes them.
  std::map<std::tuple<int, uint64_t, int, std::string>, std::string> reasons;

  std::unordered_set<std::string> placed;
  while (ContainerRecord* container = order.Next()) {
    const std::string& tenancy = container->spec.tenancy;
    const std::string key = QueueTenancy(*container);
    const sharing::Share& share = *container->spec.share;
    std::string reason;
    const auto chosen = index.Choose(share, container->tenancy_uid);
    double part = 0, use = 0;
    if (chosen) {
      const GpuRecord& gpu = model_.gpus[*chosen];
      auto others = charged.find(*chosen);
      if (others == charged.end()) others = charged.emplace(*chosen, ChargedOn(model_, gpu)).first;
      part = ChargedPart(sharing::Fraction(share, gpu.memory_bytes), others->second,
                         model_.share_holds.whole_gpu(share.mode));
      use = model_.share_holds.UseJoining(share.mode, index.Holds(*chosen, container->tenancy_uid),
                                          part);
      const int quota = model_.queue->GetTenancy(key).quota_gpus;
      if (quota != scheduling::kUnlimited && in_use[key] + use > quota + 1e-9)
        reason = QuotaWaitReason(in_use[key], quota);
    } else if (waiting) {
      auto [it, fresh] = reasons.try_emplace({static_cast<int>(share.mode), share.memory_bytes,
                                              share.compute_percent, container->tenancy_uid});
      if (fresh) {
        auto why = sharing::ChooseGpu(views, share, container->tenancy_uid, rules);
        it->second =
            why ? "waiting: room on a GPU" : "waiting: room on a GPU: " + why.error().message;
      }
      reason = it->second;
    } else {
      reason = "waiting: room on a GPU";
    }
    if (!reason.empty()) {
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
    index.Add(*chosen, share, container->tenancy_uid);
    if (dry) {
      views[*chosen].held.push_back(share);
      views[*chosen].tenancy_uid = model_.gpus[*chosen].shares.empty()
                                       ? container->tenancy_uid
                                       : model_.gpus[*chosen].shares.front().tenancy_uid;
      reasons.clear();
    }
    charged[*chosen] += part;
    in_use[key] += use;
    order.Placed(use);
    if (dry) continue;
    if (may_place_ && !may_place_()) return;
    GpuRecord& gpu = model_.gpus[*chosen];
    gpu.shares.push_back({container->id, tenancy, container->tenancy_uid, share});
    if (gpu.state == LeaseState::kFree) {
      // The first share leases the whole GPU; the last one's release checks it.
      gpu.tenancy = tenancy;
      gpu.container_id = container->id;
      model_.SetGpuState(gpu, LeaseState::kReserved, "", *out);
    }
    container->gpus = {gpu.id()};
    container->share_gpus = part;
    container->enforcement = sharing::EnforcementName(
        sharing::EnforcementOf(share.mode, static_cast<bool>(model_.options.sharing.measure)));
    model_.ShareLeftWaiting(*container);
    model_.AddMigUse(key, use);
    container->started = true;
    container->reason.clear();
    placed.insert(container->id);
    const double waited = static_cast<double>(fleet::NowMs() - container->created_ms) / 1000.0;
    model_.meter.ObserveWait(container->tenancy_uid, tenancy, waited);
    spdlog::info(
        "container {}: placed (a {} share {} / {}% of GPU {}, tenancy {}, {:.3f} GPUs of its own, "
        "its tenancy's GPUs in use +{:.3f}, enforcement {}) after {:.3f} s",
        container->id, sharing::ModeName(share.mode), sharing::FormatMemory(share.memory_bytes),
        share.compute_percent, gpu.id(), tenancy, part, use, container->enforcement, waited);
    out->push_back(*container);
    to_start->push_back(container->id);
  }
  if (dry) return;
  // Those still waiting, in submission order: the list was in it, less what left.
  std::deque<std::string> still;
  for (const auto& id : model_.share_pending) {
    auto it = model_.containers.find(id);
    if (placed.count(id) || it == model_.containers.end() ||
        it->second.state != ContainerState::kPending || it->second.started ||
        !it->second.spec.share)
      continue;
    still.push_back(id);
  }
  if (!std::is_sorted(still.begin(), still.end(), [this](const auto& a, const auto& b) {
        return model_.container_position.at(a) < model_.container_position.at(b);
      }))
    model_.SortBySubmission(still);
  model_.share_pending = std::move(still);
}

}  // namespace tessera::serve

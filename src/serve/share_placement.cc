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

#include "serve/mig_shares.h"
#include "serve/queue.h"
#include "serve/record_names.h"
#include "serve/request_order.h"
#include "serve/scheduler.h"

namespace tessera::serve {

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

// One share pass's state: every GPU's view, and what the walk has placed so far.
struct SharePass {
  explicit SharePass(const sharing::PlacementRules& rules) : rules(rules), index(rules) {}

  sharing::PlacementRules rules;
  sharing::PlacementIndex index;
  // The slices of GPUs in MIG mode, for shares of a MIG slice.
  MigShareRooms mig;
  // The report says why each waits, which takes every GPU's view (ChooseGpu's reasons); only a
  // dry walk keeps them.
  std::vector<sharing::SharedGpu> views;
  // GPUs each tenancy incarnation holds, whole, slices and shares, for its GPU quota.
  std::map<std::string, double> in_use;
  // Per GPU placed on in this walk: its shares' charged parts (ChargedPart's `others`).
  std::map<size_t, double> charged;
  // The report's reasons by request shape and tenancy, until the next placement changes them.
  std::map<std::tuple<int, uint64_t, int, std::string>, std::string> reasons;
};

// Where one share would go: its GPU, the part charged for it and what it adds to its tenancy's
// GPUs in use; a non-empty reason when it waits instead.
struct ShareChoice {
  std::optional<size_t> gpu;
  std::optional<size_t> room;  // a share of a MIG slice: its slice in SharePass::mig
  double part = 0, use = 0;
  std::string reason;
};

// The slice a share of a MIG slice takes now, or why it waits: it pays its part of the slice's
// part of the GPU, nothing held whole.
ShareChoice ChooseShareSlice(const Model& model, SharePass& pass,
                             const ContainerRecord& container) {
  const sharing::Share& share = *container.spec.share;
  const std::string key = QueueTenancy(container);
  ShareChoice choice;
  auto chosen = sharing::ChooseSlice(pass.mig.slices, share, container.tenancy_uid, pass.rules);
  if (!chosen) {
    choice.reason = "waiting: room on a MIG slice: " + chosen.error().message;
    return choice;
  }
  const auto [gpu_index, slice_index] = pass.mig.where[*chosen];
  const GpuRecord& gpu = model.gpus[gpu_index];
  choice.gpu = gpu_index;
  choice.room = *chosen;
  choice.part = MigSharePart(gpu, gpu.mig_slices[slice_index], share);
  choice.use = choice.part;
  const int quota = model.queue->GetTenancy(key).quota_gpus;
  if (quota != scheduling::kUnlimited && pass.in_use[key] + choice.use > quota + 1e-9)
    choice.reason = QuotaWaitReason(pass.in_use[key], quota);
  return choice;
}

// The GPU a share takes now, or why it waits (explained in full only when `explain`, for the
// queue report).
ShareChoice ChooseShareGpu(const Model& model, SharePass& pass, const ContainerRecord& container,
                           bool explain) {
  const sharing::Share& share = *container.spec.share;
  if (!share.mig_profile.empty()) return ChooseShareSlice(model, pass, container);
  const std::string key = QueueTenancy(container);
  ShareChoice choice;
  choice.gpu = pass.index.Choose(share, container.tenancy_uid);
  if (choice.gpu) {
    const GpuRecord& gpu = model.gpus[*choice.gpu];
    auto others = pass.charged.find(*choice.gpu);
    if (others == pass.charged.end())
      others = pass.charged.emplace(*choice.gpu, ChargedOn(model, gpu)).first;
    choice.part = ChargedPart(sharing::Fraction(share, gpu.memory_bytes), others->second,
                              model.share_holds.whole(share));
    choice.use = model.share_holds.UseJoining(
        share, pass.index.Holds(*choice.gpu, container.tenancy_uid), choice.part);
    const int quota = model.queue->GetTenancy(key).quota_gpus;
    if (quota != scheduling::kUnlimited && pass.in_use[key] + choice.use > quota + 1e-9)
      choice.reason = QuotaWaitReason(pass.in_use[key], quota);
  } else if (explain) {
    auto [it, fresh] = pass.reasons.try_emplace({static_cast<int>(share.mode), share.memory_bytes,
                                                 share.compute_percent, container.tenancy_uid});
    if (fresh) {
      auto why = sharing::ChooseGpu(pass.views, share, container.tenancy_uid, pass.rules);
      it->second =
          why ? "waiting: room on a GPU" : "waiting: room on a GPU: " + why.error().message;
    }
    choice.reason = it->second;
  } else {
    choice.reason = "waiting: room on a GPU";
  }
  return choice;
}

// The walk counts a share it placed: the GPU's room, its charged parts and its tenancy's use
// (and, in a dry walk, the views the next reasons are drawn from).
void CountShareTaken(const Model& model, SharePass& pass, const ContainerRecord& container,
                     const ShareChoice& choice, bool dry) {
  const size_t chosen = *choice.gpu;
  if (choice.room) {
    sharing::SharedGpu& room = pass.mig.slices[*choice.room].room;
    room.held.push_back(*container.spec.share);
    if (room.tenancy_uid.empty()) room.tenancy_uid = container.tenancy_uid;
    pass.in_use[QueueTenancy(container)] += choice.use;
    return;
  }
  pass.index.Add(chosen, *container.spec.share, container.tenancy_uid);
  if (dry) {
    pass.views[chosen].held.push_back(*container.spec.share);
    pass.views[chosen].tenancy_uid = model.gpus[chosen].shares.empty()
                                         ? container.tenancy_uid
                                         : model.gpus[chosen].shares.front().tenancy_uid;
    pass.reasons.clear();
  }
  pass.charged[chosen] += choice.part;
  pass.in_use[QueueTenancy(container)] += choice.use;
}

// A waiting share's entry in the queue report.
QueueEntry ShareWaitEntry(const ContainerRecord& container, int position, std::string reason) {
  QueueEntry entry;
  entry.id = container.id;
  entry.tenancy = container.spec.tenancy;
  entry.tenancy_uid = container.tenancy_uid;
  entry.share = *container.spec.share;
  entry.priority = container.spec.priority;
  entry.position = position;
  entry.reason = std::move(reason);
  entry.created_ms = container.created_ms;
  return entry;
}

// Whether `id` names a share container that still waits to be placed (mu held).
bool ShareStillPendingLocked(const Model& model, const std::string& id) {
  auto it = model.containers.find(id);
  return it != model.containers.end() && it->second.state == ContainerState::kPending &&
         !it->second.started && it->second.spec.share;
}

// mu held: the share takes its room on the chosen GPU (the first share leases the GPU whole).
void LeaseShareLocked(Model& model, const MigShareRooms& rooms, ContainerRecord& container,
                      const ShareChoice& choice, std::vector<Mutation>& out) {
  const std::string& tenancy = container.spec.tenancy;
  const sharing::Share& share = *container.spec.share;
  GpuRecord& gpu = model.gpus[*choice.gpu];
  container.mig_devices.clear();
  if (choice.room) {
    fleet::MigSlice& slice = gpu.mig_slices[rooms.where[*choice.room].second];
    TakeSharedSliceLocked(gpu, slice, container);
    container.mig_devices = {slice.id};
  } else {
    gpu.shares.push_back({container.id, tenancy, container.tenancy_uid, share, ""});
  }
  if (gpu.state == LeaseState::kFree) {
    // The first share leases the whole GPU; the last one's release checks it.
    gpu.tenancy = tenancy;
    gpu.container_id = container.id;
    model.SetGpuState(gpu, LeaseState::kReserved, "", out);
  }
  container.gpus = {gpu.id()};
  container.share_gpus = choice.part;
  container.enforcement = sharing::EnforcementName(
      sharing::EnforcementOf(share.mode, static_cast<bool>(model.options.sharing.measure)));
  model.ShareLeftWaiting(container);
  model.AddMigUse(QueueTenancy(container), choice.use);
  container.started = true;
  container.reason.clear();
  const double waited = static_cast<double>(fleet::NowMs() - container.created_ms) / 1000.0;
  model.meter.ObserveWait(container.tenancy_uid, tenancy, waited);
  spdlog::info(
      "container {}: placed (a {} share {} / {}% of {}GPU {}, tenancy {}, {:.3f} GPUs of its own, "
      "its tenancy's GPUs in use +{:.3f}, enforcement {}) after {:.3f} s",
      container.id, sharing::ModeName(share.mode), sharing::FormatMemory(share.memory_bytes),
      share.compute_percent,
      container.mig_devices.empty() ? "" : "MIG device " + container.mig_devices.front() + " of ",
      gpu.id(), tenancy, choice.part, choice.use, container.enforcement, waited);
  out.push_back(container);
}

// mu held: the share list keeps those still waiting, in submission order (the list was in it,
// less what left).
void KeepWaitingSharesLocked(Model& model, const std::unordered_set<std::string>& placed) {
  std::deque<std::string> still;
  for (const auto& id : model.share_pending) {
    if (placed.count(id) || !ShareStillPendingLocked(model, id)) continue;
    still.push_back(id);
  }
  if (!std::is_sorted(still.begin(), still.end(), [&model](const auto& a, const auto& b) {
        return model.container_position.at(a) < model.container_position.at(b);
      }))
    model.SortBySubmission(still);
  model.share_pending = std::move(still);
}

}  // namespace

bool ShareMightStartLocked(const Model& model, const ContainerRecord& container) {
  if (!container.spec.share) return false;
  const sharing::Share& share = *container.spec.share;
  const auto rules = RulesOf(model);
  // A share of a MIG slice: whether a slice of its profile has room (its quota is the pass's).
  if (!share.mig_profile.empty())
    return static_cast<bool>(
        sharing::ChooseSlice(MigShareRoomsOf(model).slices, share, container.tenancy_uid, rules));
  // The least it could add to its tenancy's GPUs in use: nothing on a GPU it pays whole already.
  std::optional<double> least;
  for (size_t i = 0; i < model.gpus.size(); ++i) {
    const GpuRecord& gpu = model.gpus[i];
    const sharing::SharedGpu view = ShareViewOf(gpu, model.reserved_gpus.count(i) > 0);
    if (!sharing::Fits(view, share, container.tenancy_uid, rules)) continue;
    const bool holds = !view.held.empty() && view.tenancy_uid == container.tenancy_uid;
    const double part = ChargedPart(sharing::Fraction(share, gpu.memory_bytes),
                                    ChargedOn(model, gpu), model.share_holds.whole(share));
    const double use = model.share_holds.UseJoining(share, holds, part);
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
  SharePass pass(RulesOf(model_));
  if (dry) pass.views.reserve(model_.gpus.size());
  for (size_t i = 0; i < model_.gpus.size(); ++i) {
    auto view = ShareViewOf(model_.gpus[i], model_.reserved_gpus.count(i) > 0);
    pass.index.Set(i, view);
    if (dry) pass.views.push_back(std::move(view));
  }
  pass.mig = MigShareRoomsOf(model_);
  if (!dry && !pass.index.AnyRoom() && !AnySliceRoom(pass.mig)) {
    // No GPU has room for any share: none is tried.
    model_.DropStalePending(model_.share_pending, model_.share_waiting);
    AskForMigSharesLocked(model_);
    return;
  }
  std::vector<ContainerRecord*> pending;
  pending.reserve(model_.share_pending.size());
  for (const auto& id : model_.share_pending)
    if (ShareStillPendingLocked(model_, id)) pending.push_back(&model_.containers.at(id));
  RequestOrder order(std::move(pending), *model_.queue);
  for (const auto& usage : model_.queue->Usage())
    pass.in_use[usage.name] = usage.in_use + usage.other_gpus;

  std::unordered_set<std::string> placed;
  while (ContainerRecord* container = order.Next()) {
    ShareChoice choice = ChooseShareGpu(model_, pass, *container, waiting != nullptr);
    if (!choice.reason.empty()) {
      if (waiting)
        waiting->push_back(ShareWaitEntry(*container, static_cast<int>(waiting->size()) + 1,
                                          std::move(choice.reason)));
      continue;
    }
    CountShareTaken(model_, pass, *container, choice, dry);
    order.Placed(choice.use);
    if (dry) continue;
    if (may_place_ && !may_place_()) return;
    LeaseShareLocked(model_, pass.mig, *container, choice, *out);
    placed.insert(container->id);
    to_start->push_back(container->id);
  }
  if (dry) return;
  KeepWaitingSharesLocked(model_, placed);
  AskForMigSharesLocked(model_);
}

}  // namespace tessera::serve

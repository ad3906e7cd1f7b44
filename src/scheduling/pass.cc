// The scheduling pass, step by step: reservations kept from the last pass, their holders
// started, then the walk of the tenancies' merged queues (admission, backfill into reserved
// GPUs, new reservations, waits), stopping early when nothing more can change.
#include <algorithm>
#include <cmath>
#include <queue>

#include "scheduling/scheduling.h"

namespace tessera::scheduling {

using placement::Fleet;
using placement::GpuMask;
using placement::Placement;
using topology::MaskSize;

namespace {

// `gpus` GPUs on `node` out of `allowed` as the node's own chooser gives them (a whole partition,
// the best-linked set, or the lowest GPUs); false when they do not fit.
bool PlaceOnNode(const Fleet& fleet, int node, GpuMask allowed, int gpus, Placement* out) {
  const auto& spec = fleet.node(node);
  out->node = node;
  out->partition_id.reset();
  if (spec.partitions) {
    const topology::PartitionChoice* choice = spec.partitions->Best(allowed, gpus);
    if (!choice) return false;
    out->gpus = choice->modules;
    out->partition_id = choice->partition_id;
    return true;
  }
  if (MaskSize(allowed) < gpus) return false;
  if (spec.scorer) {
    auto chosen = spec.scorer->Choose(allowed, gpus);
    if (!chosen) return false;
    out->gpus = *chosen;
    return true;
  }
  out->gpus = 0;
  for (int i = 0; i < gpus; ++i) {
    const GpuMask low = allowed & (~allowed + 1);
    out->gpus |= low;
    allowed &= ~low;
  }
  return true;
}

// Whether `gpus` GPUs could be given on `node` from `free`.
bool FitsIn(const Fleet& fleet, int node, GpuMask free, int gpus) {
  const auto& spec = fleet.node(node);
  if (spec.partitions) return spec.partitions->Best(free, gpus) != nullptr;
  return MaskSize(free) >= gpus;
}

}  // namespace

// One Schedule call: its state and its steps.
class Scheduler::Pass {
 public:
  Pass(Scheduler& scheduler, Fleet& fleet, double now_s, bool report);
  // Reservations of the last pass whose holders still wait keep their GPUs, with their time
  // worked out again from what runs there now.
  void KeepReservations();
  // Holders whose reserved GPUs are free start first, on them, before anything else is walked:
  // otherwise the next request of the same tenancy would reserve the GPUs they leave in the same
  // pass, and a tenancy could hold a node from one of its requests to the next.
  void StartHolders();
  // The walk of the tenancies' merged queues: each request admitted, or its wait said.
  void Walk();
  // What the last pass found, for CouldChangeAPass, the reservations kept for the next one, and
  // the preemptions chosen.
  PassResult Finish();

 private:
  // The fleet's free masks with reserved GPUs taken out for the length of one pass, so the
  // placement policy never sees them; put back when the pass ends.
  class HiddenGpus {
   public:
    explicit HiddenGpus(Fleet& fleet) : fleet_(fleet), hidden_(fleet.node_count(), 0) {}
    ~HiddenGpus() { ShowAll(); }
    void ShowAll() {
      for (int node : touched_) {
        if (hidden_[node]) (void)fleet_.SetFreeMask(node, fleet_.free_mask(node) | hidden_[node]);
        hidden_[node] = 0;
      }
      touched_.clear();
      total_ = 0;
    }
    // Hides the free GPUs of `mask` on `node`; returns how many were free.
    int Hide(int node, GpuMask mask) {
      const GpuMask free = fleet_.free_mask(node) & mask;
      if (!free) return 0;
      if (!hidden_[node]) touched_.push_back(node);
      hidden_[node] |= free;
      (void)fleet_.SetFreeMask(node, fleet_.free_mask(node) & ~free);
      total_ += MaskSize(free);
      return MaskSize(free);
    }
    // Shows `mask`'s hidden GPUs on `node` for one placement attempt, then hides what is left.
    bool PlaceWith(int node, GpuMask mask, int gpus, placement::Policy policy, Placement* out) {
      const GpuMask shown = hidden_[node] & mask;
      if (!shown) return false;
      (void)fleet_.SetFreeMask(node, fleet_.free_mask(node) | shown);
      const bool placed = fleet_.TryPlace(gpus, policy, out);
      const GpuMask still_free = fleet_.free_mask(node) & shown;
      (void)fleet_.SetFreeMask(node, fleet_.free_mask(node) & ~still_free);
      total_ -= MaskSize(shown) - MaskSize(still_free);
      hidden_[node] = (hidden_[node] & ~shown) | still_free;
      return placed;
    }
    // Gives `mask`'s hidden GPUs on `node` back to the fleet for the rest of the pass.
    void Show(int node, GpuMask mask) {
      const GpuMask shown = hidden_[node] & mask;
      if (!shown) return;
      (void)fleet_.SetFreeMask(node, fleet_.free_mask(node) | shown);
      hidden_[node] &= ~shown;
      total_ -= MaskSize(shown);
    }
    GpuMask hidden(int node) const { return hidden_[node]; }
    int total() const { return total_; }

   private:
    Fleet& fleet_;
    std::vector<GpuMask> hidden_;
    std::vector<int> touched_;
    int total_ = 0;
  };

  // Dispatch order: a merge of the tenancies' own queues. Fair: the tenancy with the lowest
  // (recent usage + GPUs in use + GPUs of its requests already passed in this walk) / weight
  // goes next, so positions interleave as shares would fill. FIFO: lowest sequence first.
  struct Cursor {
    double key;
    int tenancy;
    bool operator>(const Cursor& other) const {
      return key != other.key ? key > other.key : tenancy > other.tenancy;
    }
  };

  // Fair: a tenancy above its share keeps no reservation while a tenancy further below its
  // share waits; kept, the reservation would start its requests ahead of the fair order (a
  // flood's reservations would hold every GPU that frees for it).
  std::vector<bool> TenancyYields() const;
  // `kept` with its time worked out again; nullopt when it is not kept.
  std::optional<Reservation> Renew(const Reservation& kept, const std::vector<bool>& yields) const;
  void Admit(Pending& pending, const Placement& placement, bool backfill);
  // Counts (sign 1) or uncounts (-1) tenancy `t`'s live sizes.
  void CountLive(size_t t, int sign);
  // When the walk may stop (without report): once no pending request could start or reserve.
  bool MayChange() const;
  void StartOrder();
  double HeadKey(int t) const;
  // Admits `pending` of tenancy `t`, or says in `wait` why not; true when admitted.
  bool Decide(int t, Pending& pending, Wait& wait);
  // A holder starts on its own reserved GPUs (or anywhere else that fits now), or keeps waiting
  // for them.
  bool StartHolder(int t, Pending& pending, int reservation, Wait& wait);
  bool PlaceOrReserve(int t, Pending& pending, Wait& wait);
  // Backfill into reserved GPUs: only a request that ends before the reservation needs them.
  bool Backfill(Pending& pending);
  // A new reservation for `pending`, or its wait for capacity (or for GPUs reserved for someone
  // else).
  void ReserveOrWait(int t, const Pending& pending, Wait& wait);
  void AddReservation(Reservation reservation);

  Scheduler& s_;
  Fleet& fleet_;
  const double now_s_;
  const bool report_;
  const bool fair_;
  PassResult result_;
  HiddenGpus hidden_;
  std::vector<GpuMask> reserved_;
  int free_visible_;
  // Per size: 1 when nothing visible fits (stays true: a pass only takes GPUs away), and
  // whether the size can ever be placed (-1 unknown).
  std::array<bool, kMaxSize + 1> no_fit_{};
  // Per size: the earliest end that found no reserved GPUs to backfill into. A later request of
  // that size ending no earlier finds none either: reserved GPUs a pass hides only ever come
  // from capacity it could not use, and backfill only takes them away.
  std::array<double, kMaxSize + 1> backfill_failed_end_;
  std::array<int, kMaxSize + 1> placeable_;
  int position_ = 0;
  std::unordered_map<RequestId, int> held_;  // holder -> index into result_.reservations
  std::vector<bool> released_;               // per reservation: its holder started
  // Per size, what the walk found out (monotone while nothing is admitted: a pass only takes
  // GPUs away and adds reservations); and per size how many tenancies not held back by their
  // GPU quota have requests of that size waiting.
  std::array<bool, kMaxSize + 1> reserve_failed_{};
  std::array<int, kMaxSize + 1> live_sizes_{};
  std::vector<int> live_up_to_;  // per tenancy: its largest live size
  size_t holders_left_ = 0;
  std::priority_queue<Cursor, std::vector<Cursor>, std::greater<>> order_;
  std::vector<decltype(Tenancy::queue)::iterator> next_;
  std::vector<double> walked_gpus_;
};

Scheduler::Pass::Pass(Scheduler& scheduler, Fleet& fleet, double now_s, bool report)
    : s_(scheduler),
      fleet_(fleet),
      now_s_(now_s),
      report_(report),
      fair_(scheduler.options_.mode == Mode::kFair),
      hidden_(fleet),
      reserved_(fleet.node_count(), 0),
      free_visible_(fleet.free_gpus()),
      live_up_to_(scheduler.tenancies_.size(), 0),
      next_(scheduler.tenancies_.size()),
      walked_gpus_(scheduler.tenancies_.size(), 0) {
  backfill_failed_end_.fill(kUnknownTime);
  placeable_.fill(-1);
}

std::vector<bool> Scheduler::Pass::TenancyYields() const {
  std::vector<bool> yields(s_.tenancies_.size(), false);
  if (!fair_) return yields;
  const std::vector<TenancyUsage> usage = s_.Usage();
  double lowest_waiting = kUnknownTime;
  for (size_t t = 0; t < s_.tenancies_.size(); ++t)
    if (!s_.tenancies_[t].queue.empty())
      lowest_waiting = std::min(lowest_waiting, s_.ShareKey(s_.tenancies_[t], 0));
  for (size_t t = 0; t < s_.tenancies_.size(); ++t)
    yields[t] =
        usage[t].share > usage[t].target && s_.ShareKey(s_.tenancies_[t], 0) > lowest_waiting;
  return yields;
}

std::optional<Reservation> Scheduler::Pass::Renew(const Reservation& kept,
                                                  const std::vector<bool>& yields) const {
  auto it = s_.pending_.find(kept.holder);
  if (it == s_.pending_.end() || kept.node >= fleet_.node_count()) return std::nullopt;
  const Tenancy& owner = s_.tenancies_[it->second.tenancy];
  if (fair_ && owner.in_use + owner.other_gpus + it->second.request.gpus > owner.policy.quota_gpus)
    return std::nullopt;
  if (yields[it->second.tenancy]) return std::nullopt;
  if (kept.gpus & reserved_[kept.node]) return std::nullopt;
  Reservation again = kept;
  again.ready_s = now_s_;
  for (GpuMask m = kept.gpus; m; m &= m - 1) {
    const int gpu = __builtin_ctzll(m);
    if (gpu >= fleet_.node(kept.node).gpu_count) return std::nullopt;
    if ((fleet_.free_mask(kept.node) >> gpu) & 1) continue;
    const placement::GpuState state = fleet_.state(kept.node, gpu);
    if (state == placement::GpuState::kQuarantined || state == placement::GpuState::kDraining)
      return std::nullopt;
    const bool known = state == placement::GpuState::kLeased && s_.gpu_owner_[kept.node][gpu] != 0;
    again.ready_s = std::max(again.ready_s, known ? s_.gpu_ends_[kept.node][gpu] : kUnknownTime);
  }
  return again;
}

void Scheduler::Pass::KeepReservations() {
  const std::vector<bool> yields = TenancyYields();
  for (const Reservation& kept : s_.kept_) {
    auto again = Renew(kept, yields);
    if (!again) continue;
    reserved_[again->node] |= again->gpus;
    free_visible_ -= hidden_.Hide(again->node, again->gpus);
    held_[again->holder] = static_cast<int>(result_.reservations.size());
    result_.reservations.push_back(*again);
    released_.push_back(false);
  }
}

void Scheduler::Pass::Admit(Pending& pending, const Placement& placement, bool backfill) {
  result_.admitted.push_back({pending.request.id, placement, backfill});
  const PendingRequest& r = pending.request;
  free_visible_ -= backfill ? 0 : r.gpus;
  Running running;
  running.tenancy = pending.tenancy;
  running.placement = placement;
  running.gpus = r.gpus;
  running.started_s = now_s_;
  running.ends_s = r.max_duration_s == kUnknownTime ? kUnknownTime : now_s_ + r.max_duration_s;
  running.priority = r.priority;
  running.preemptible = r.preemptible;
  s_.tenancies_[pending.tenancy].in_use += r.gpus;
  s_.SetGpuOwner(placement, running.ends_s, r.id);
  s_.running_.emplace(r.id, std::move(running));
}

void Scheduler::Pass::StartHolders() {
  for (size_t i = 0; i < result_.reservations.size(); ++i) {
    Reservation& mine = result_.reservations[i];
    Pending& pending = s_.pending_.at(mine.holder);
    Placement placement;
    if (!PlaceOnNode(fleet_, mine.node, hidden_.hidden(mine.node) & mine.gpus, pending.request.gpus,
                     &placement)) {
      continue;
    }
    ++result_.decisions;
    hidden_.Show(mine.node, mine.gpus);
    (void)fleet_.SetFreeMask(mine.node, fleet_.free_mask(mine.node) & ~placement.gpus);
    reserved_[mine.node] &= ~mine.gpus;
    released_[i] = true;
    held_.erase(mine.holder);
    Admit(pending, placement, false);
    s_.Removed(pending);
    s_.pending_.erase(mine.holder);
  }
  free_visible_ = fleet_.free_gpus() - hidden_.total();
}

void Scheduler::Pass::CountLive(size_t t, int sign) {
  const Tenancy& tenancy = s_.tenancies_[t];
  int up_to = kMaxSize;
  if (fair_ && tenancy.policy.quota_gpus != kUnlimited)
    up_to = static_cast<int>(
        std::floor(tenancy.policy.quota_gpus - tenancy.in_use - tenancy.other_gpus + 1e-9));
  up_to = std::clamp(up_to, 0, kMaxSize);
  if (sign < 0) up_to = live_up_to_[t];
  for (int size = 1; size <= up_to; ++size)
    if (tenancy.pending_by_size[size]) live_sizes_[size] += sign;
  live_up_to_[t] = up_to;
}

bool Scheduler::Pass::MayChange() const {
  if (holders_left_ > 0) return true;
  const bool reservations_full =
      static_cast<int>(result_.reservations.size()) >= s_.options_.max_reservations;
  const int hidden_free = hidden_.total();
  double latest_ready = -kUnknownTime;
  for (const Reservation& r : result_.reservations)
    if (r.ready_s != kUnknownTime) latest_ready = std::max(latest_ready, r.ready_s);
  for (int size = 1; size <= kMaxSize; ++size) {
    if (live_sizes_[size] <= 0) continue;
    if (size <= free_visible_ && !no_fit_[size]) return true;
    if (!reservations_full && !reserve_failed_[size]) return true;
    const auto& durations = s_.limited_durations_[size];
    if (hidden_free > 0 && !durations.empty() && size <= free_visible_ + hidden_free) {
      const double ends = now_s_ + *durations.begin();
      if (ends < backfill_failed_end_[size] && ends <= latest_ready) return true;
    }
  }
  return false;
}

double Scheduler::Pass::HeadKey(int t) const {
  if (fair_) return s_.ShareKey(s_.tenancies_[t], walked_gpus_[t]);
  return static_cast<double>(std::get<2>(*next_[t]));
}

void Scheduler::Pass::StartOrder() {
  if (!report_) {
    for (size_t t = 0; t < s_.tenancies_.size(); ++t)
      if (!s_.tenancies_[t].queue.empty()) CountLive(t, 1);
  }
  holders_left_ = held_.size();
  for (size_t t = 0; t < s_.tenancies_.size(); ++t) {
    next_[t] = s_.tenancies_[t].queue.begin();
    if (next_[t] != s_.tenancies_[t].queue.end()) {
      order_.push({HeadKey(static_cast<int>(t)), static_cast<int>(t)});
    }
  }
}

void Scheduler::Pass::Walk() {
  StartOrder();
  while (!order_.empty()) {
    const int t = order_.top().tenancy;
    order_.pop();
    Tenancy& tenancy = s_.tenancies_[t];
    const auto entry = next_[t]++;
    const RequestId id = std::get<3>(*entry);
    Pending& pending = s_.pending_.at(id);
    const int gpus = pending.request.gpus;
    ++result_.decisions;

    Wait wait;
    wait.id = id;
    if (!Decide(t, pending, wait)) {
      walked_gpus_[t] += gpus;
      wait.position = ++position_;
      if (report_) result_.waiting.push_back(wait);
    } else {
      if (!report_) CountLive(static_cast<size_t>(t), -1);
      s_.Removed(pending);
      s_.pending_.erase(id);
      // Its start changed what is running: a reservation that could not be chosen before may
      // be now, and its tenancy's room under its GPU quota shrank.
      reserve_failed_.fill(false);
      if (!report_ && !tenancy.queue.empty()) CountLive(static_cast<size_t>(t), 1);
    }
    if (next_[t] != tenancy.queue.end()) order_.push({HeadKey(t), t});
    if (!report_ && !MayChange()) {
      result_.stopped_early = !order_.empty();
      break;
    }
  }
}

bool Scheduler::Pass::Decide(int t, Pending& pending, Wait& wait) {
  const Tenancy& tenancy = s_.tenancies_[t];
  const int gpus = pending.request.gpus;
  int& can = placeable_[gpus];
  if (can < 0) can = fleet_.CanEverPlace(gpus).ok() ? 1 : 0;
  if (!can) {
    wait.kind = WaitKind::kNeverPlaceable;
    reserve_failed_[gpus] = true;
    return false;
  }
  if (fair_ && tenancy.in_use + tenancy.other_gpus + gpus > tenancy.policy.quota_gpus) {
    wait.kind = WaitKind::kQuotaGpus;
    wait.in_use = tenancy.in_use + tenancy.other_gpus;
    wait.quota = tenancy.policy.quota_gpus;
    return false;
  }
  if (auto own = held_.find(pending.request.id); own != held_.end())
    return StartHolder(t, pending, own->second, wait);
  return PlaceOrReserve(t, pending, wait);
}

bool Scheduler::Pass::StartHolder(int t, Pending& pending, int reservation, Wait& wait) {
  const int gpus = pending.request.gpus;
  --holders_left_;
  Reservation& mine = result_.reservations[reservation];
  mine.holder_tenancy = t;
  mine.holder_walked_gpus = walked_gpus_[t];
  Placement placement;
  const bool admitted =
      hidden_.PlaceWith(mine.node, mine.gpus, gpus, s_.options_.placement, &placement) ||
      (!no_fit_[gpus] && free_visible_ >= gpus &&
       fleet_.TryPlace(gpus, s_.options_.placement, &placement));
  if (!admitted) {
    wait.kind = WaitKind::kReservation;
    wait.reservation = reservation;
    return false;
  }
  Admit(pending, placement, false);
  // Its reservation ends: what it did not use goes back to everyone.
  reserved_[mine.node] &= ~mine.gpus;
  hidden_.Show(mine.node, mine.gpus);
  released_[reservation] = true;
  free_visible_ = fleet_.free_gpus() - hidden_.total();
  return true;
}

bool Scheduler::Pass::PlaceOrReserve(int t, Pending& pending, Wait& wait) {
  const int gpus = pending.request.gpus;
  if (!no_fit_[gpus]) {
    Placement placement;
    if (free_visible_ >= gpus && fleet_.TryPlace(gpus, s_.options_.placement, &placement)) {
      Admit(pending, placement, false);
      return true;
    }
    no_fit_[gpus] = true;
  }
  if (hidden_.total() > 0 && pending.request.max_duration_s != kUnknownTime &&
      now_s_ + pending.request.max_duration_s < backfill_failed_end_[gpus]) {
    if (Backfill(pending)) return true;
  }
  ReserveOrWait(t, pending, wait);
  return false;
}

bool Scheduler::Pass::Backfill(Pending& pending) {
  const int gpus = pending.request.gpus;
  const double ends = now_s_ + pending.request.max_duration_s;
  for (size_t i = 0; i < result_.reservations.size(); ++i) {
    const Reservation& r = result_.reservations[i];
    if (r.ready_s == kUnknownTime || ends > r.ready_s) continue;
    // Every reservation on that node this request would not delay.
    GpuMask allowed = 0;
    for (const Reservation& other : result_.reservations) {
      if (other.node == r.node && other.ready_s != kUnknownTime && ends <= other.ready_s)
        allowed |= other.gpus;
    }
    if (!FitsIn(fleet_, r.node, fleet_.free_mask(r.node) | (hidden_.hidden(r.node) & allowed),
                gpus))
      continue;
    Placement placement;
    if (hidden_.PlaceWith(r.node, allowed, gpus, s_.options_.placement, &placement)) {
      Admit(pending, placement, true);
      return true;
    }
  }
  backfill_failed_end_[gpus] = std::min(backfill_failed_end_[gpus], ends);
  return false;
}

void Scheduler::Pass::ReserveOrWait(int t, const Pending& pending, Wait& wait) {
  const int gpus = pending.request.gpus;
  const bool room = static_cast<int>(result_.reservations.size()) < s_.options_.max_reservations;
  Reservation reservation;
  if (room && s_.ChooseReservation(fleet_, gpus, reserved_, now_s_, &reservation)) {
    reservation.holder = pending.request.id;
    reservation.holder_tenancy = t;
    reservation.holder_walked_gpus = walked_gpus_[t];
    wait.kind = WaitKind::kReservation;
    wait.reservation = static_cast<int>(result_.reservations.size());
    AddReservation(reservation);
    return;
  }
  if (room) reserve_failed_[gpus] = true;
  wait.kind = WaitKind::kNoCapacity;
  wait.free_gpus = free_visible_;
  // Reserved for someone else when it would fit with a reservation's GPUs shown.
  for (size_t i = 0; i < result_.reservations.size(); ++i) {
    const Reservation& r = result_.reservations[i];
    if (FitsIn(fleet_, r.node, fleet_.free_mask(r.node) | hidden_.hidden(r.node), gpus)) {
      wait.kind = WaitKind::kReserved;
      wait.reservation = static_cast<int>(i);
      break;
    }
  }
}

void Scheduler::Pass::AddReservation(Reservation reservation) {
  reserved_[reservation.node] |= reservation.gpus;
  free_visible_ -= hidden_.Hide(reservation.node, reservation.gpus);
  result_.reservations.push_back(reservation);
  released_.push_back(false);
}

PassResult Scheduler::Pass::Finish() {
  auto& last = s_.last_pass_;
  last.valid = true;
  last.now_s = now_s_;
  last.free_visible = fleet_.free_gpus() - hidden_.total();
  last.free_hidden = hidden_.total();
  last.no_fit = no_fit_;
  last.backfill_failed_end = backfill_failed_end_;
  last.reserve_failed = reserve_failed_;
  hidden_.ShowAll();
  s_.kept_.clear();
  last.latest_ready_s = -kUnknownTime;
  for (size_t i = 0; i < result_.reservations.size(); ++i) {
    if (released_[i]) continue;
    s_.kept_.push_back(result_.reservations[i]);
    if (result_.reservations[i].ready_s != kUnknownTime)
      last.latest_ready_s = std::max(last.latest_ready_s, result_.reservations[i].ready_s);
  }
  if (s_.options_.preemption) {
    result_.preemptions = s_.ChoosePreemptions(fleet_, result_, reserved_, now_s_);
  }
  return std::move(result_);
}

PassResult Scheduler::Schedule(Fleet& fleet, double now_s, bool report) {
  Advance(now_s);
  EnsureNodes(fleet);
  if (pending_.empty()) {
    kept_.clear();
    last_pass_.valid = false;  // the next arrival is a change
    return PassResult();
  }
  Pass pass(*this, fleet, now_s, report);
  pass.KeepReservations();
  pass.StartHolders();
  pass.Walk();
  return pass.Finish();
}

}  // namespace tessera::scheduling

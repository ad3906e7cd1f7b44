// The queue and the scheduling pass: dispatch order, quotas, admission, reservations and
// backfill.
#include <algorithm>
#include <cmath>
#include <queue>

#include "scheduling/scheduling.h"

namespace tessera::scheduling {

using placement::Fleet;
using placement::GpuMask;
using placement::Placement;
using topology::MaskSize;

Result<Scheduler> Scheduler::Create(SchedulerOptions options) {
  if (auto valid = ValidateSchedulerOptions(options); !valid) return valid.error();
  Scheduler scheduler(options);
  scheduler.tau_s_ = options.half_life_s / std::log(2.0);
  return scheduler;
}

int Scheduler::FindTenancy(const std::string& name) const {
  auto it = tenancy_index_.find(name);
  return it == tenancy_index_.end() ? -1 : it->second;
}

int Scheduler::TenancyIndex(const std::string& name) {
  auto [it, inserted] = tenancy_index_.emplace(name, static_cast<int>(tenancies_.size()));
  if (inserted) {
    tenancies_.emplace_back();
    tenancies_.back().name = name;
  }
  return it->second;
}

Status Scheduler::SetTenancy(const std::string& name, const TenancyPolicy& policy) {
  if (auto valid = ValidateTenancyPolicy(policy); !valid) return valid.error();
  Tenancy& tenancy = tenancies_[TenancyIndex(name)];
  const bool rekey = tenancy.policy.max_priority != policy.max_priority;
  tenancy.policy = policy;
  if (rekey) {
    // Priorities above the new maximum count as the maximum from now on.
    decltype(tenancy.queue) queue;
    for (const auto& entry : tenancy.queue)
      queue.insert(QueueKey(pending_.at(std::get<3>(entry))));
    tenancy.queue = std::move(queue);
  }
  return Ok();
}

TenancyPolicy Scheduler::GetTenancy(const std::string& name) const {
  const int index = FindTenancy(name);
  return index < 0 ? TenancyPolicy{} : tenancies_[index].policy;
}

int Scheduler::PendingQuotaOf(const std::string& name) const {
  const int quota = GetTenancy(name).quota_pending;
  return quota == kDefaultQuota ? options_.default_quota_pending : quota;
}

std::string Scheduler::TenancyOf(RequestId id) const {
  if (auto it = pending_.find(id); it != pending_.end()) return tenancies_[it->second.tenancy].name;
  if (auto it = running_.find(id); it != running_.end()) return tenancies_[it->second.tenancy].name;
  return "";
}

const PendingRequest* Scheduler::Request(RequestId id) const {
  auto it = pending_.find(id);
  return it == pending_.end() ? nullptr : &it->second.request;
}

void Scheduler::Added(const Pending& pending) {
  Tenancy& tenancy = tenancies_[pending.tenancy];
  const int gpus = pending.request.gpus;
  tenancy.queue.insert(QueueKey(pending));
  tenancy.pending_by_size[gpus]++;
  tenancy.pending_gpus += gpus;
  if (pending.request.max_duration_s != kUnknownTime)
    limited_durations_[gpus].insert(pending.request.max_duration_s);
}

void Scheduler::Removed(const Pending& pending) {
  Tenancy& tenancy = tenancies_[pending.tenancy];
  const int gpus = pending.request.gpus;
  tenancy.queue.erase(QueueKey(pending));
  tenancy.pending_by_size[gpus]--;
  tenancy.pending_gpus -= gpus;
  if (pending.request.max_duration_s != kUnknownTime) {
    auto& durations = limited_durations_[gpus];
    if (auto it = durations.find(pending.request.max_duration_s); it != durations.end())
      durations.erase(it);
  }
}

Scheduler::OrderKey Scheduler::QueueKey(const Pending& pending) const {
  const PendingRequest& r = pending.request;
  if (options_.mode == Mode::kFifo)
    return {0, 0.0, pending.sequence, r.id, r.gpus, r.max_duration_s, r.priority};
  const int bound = tenancies_[pending.tenancy].policy.max_priority;
  const int priority = std::clamp(r.priority, kMinPriority, bound);
  return {-priority, r.submitted_s, pending.sequence, r.id, r.gpus, r.max_duration_s, r.priority};
}

Scheduler::Snapshot Scheduler::TakeSnapshot() const {
  Snapshot snapshot;
  snapshot.options_ = options_;
  snapshot.tau_s_ = tau_s_;
  snapshot.now_s_ = now_s_;
  snapshot.next_sequence_ = next_sequence_;
  snapshot.tenancies_.reserve(tenancies_.size());
  for (const Tenancy& tenancy : tenancies_) {
    auto& state = snapshot.tenancies_.emplace_back();
    state.name = tenancy.name;
    state.policy = tenancy.policy;
    state.in_use = tenancy.in_use;
    state.other_gpus = tenancy.other_gpus;
    state.decayed_gpu_seconds = tenancy.decayed_gpu_seconds;
    state.pending.assign(tenancy.queue.begin(), tenancy.queue.end());
  }
  snapshot.running_.assign(running_.begin(), running_.end());
  snapshot.gpu_ends_ = gpu_ends_;
  snapshot.gpu_owner_ = gpu_owner_;
  snapshot.kept_ = kept_;
  return snapshot;
}

Scheduler Scheduler::FromSnapshot(const Snapshot& snapshot) {
  Scheduler scheduler(snapshot.options_);
  scheduler.tau_s_ = snapshot.tau_s_;
  scheduler.now_s_ = snapshot.now_s_;
  scheduler.next_sequence_ = snapshot.next_sequence_;
  for (const auto& state : snapshot.tenancies_) {
    const int index = scheduler.TenancyIndex(state.name);
    Tenancy& tenancy = scheduler.tenancies_[index];
    tenancy.policy = state.policy;
    tenancy.in_use = state.in_use;
    tenancy.other_gpus = state.other_gpus;
    tenancy.decayed_gpu_seconds = state.decayed_gpu_seconds;
    for (const OrderKey& key : state.pending) {
      Pending pending;
      pending.tenancy = index;
      pending.sequence = std::get<2>(key);
      pending.request.id = std::get<3>(key);
      pending.request.gpus = std::get<4>(key);
      pending.request.max_duration_s = std::get<5>(key);
      pending.request.priority = std::get<6>(key);
      pending.request.submitted_s = std::get<1>(key);
      auto [it, inserted] = scheduler.pending_.emplace(pending.request.id, std::move(pending));
      if (inserted) scheduler.Added(it->second);
    }
  }
  scheduler.running_.insert(snapshot.running_.begin(), snapshot.running_.end());
  scheduler.gpu_ends_ = snapshot.gpu_ends_;
  scheduler.gpu_owner_ = snapshot.gpu_owner_;
  scheduler.kept_ = snapshot.kept_;
  return scheduler;
}

Status Scheduler::CheckSubmit(const PendingRequest& request) const {
  if (request.gpus < 1 || request.gpus > 64) {
    return InvalidArgument("gpus: " + std::to_string(request.gpus) + " (expected 1..64)");
  }
  const int index = FindTenancy(request.tenancy);
  const TenancyPolicy policy = index < 0 ? TenancyPolicy{} : tenancies_[index].policy;
  if (request.priority < kMinPriority || request.priority > policy.max_priority) {
    return InvalidArgument("priority: " + std::to_string(request.priority) + " (tenancy " +
                           request.tenancy + " allows " + std::to_string(kMinPriority) + ".." +
                           std::to_string(policy.max_priority) + ")");
  }
  if (request.max_duration_s != kUnknownTime &&
      !(request.max_duration_s >= 1 && request.max_duration_s <= kMaxDurationLimitSeconds)) {
    return InvalidArgument("maxDurationSeconds: expected 1.." +
                           std::to_string(static_cast<int64_t>(kMaxDurationLimitSeconds)));
  }
  const int pending = PendingOf(request.tenancy);
  const int quota = PendingQuotaOf(request.tenancy);
  if (pending >= quota) {
    return FailedPrecondition("tenancy quota: " + std::to_string(pending) + "/" +
                              std::to_string(quota) + " requests pending");
  }
  return Ok();
}

int Scheduler::PendingOf(const std::string& tenancy) const {
  const int index = FindTenancy(tenancy);
  return index < 0 ? 0 : static_cast<int>(tenancies_[index].queue.size());
}

Status Scheduler::Enqueue(PendingRequest request) {
  if (request.id == 0) return InvalidArgument("request ID 0 is reserved");
  if (pending_.count(request.id) || running_.count(request.id)) {
    return AlreadyExists("request " + std::to_string(request.id) + " is already known");
  }
  if (request.gpus < 1 || request.gpus > kMaxSize) {
    return InvalidArgument("gpus: " + std::to_string(request.gpus) + " (expected 1..64)");
  }
  Pending pending;
  pending.tenancy = TenancyIndex(request.tenancy);
  pending.sequence = next_sequence_++;
  pending.request = std::move(request);
  // Known by its index from here on: no string per pending request.
  pending.request.tenancy = std::string();
  auto [it, inserted] = pending_.emplace(pending.request.id, std::move(pending));
  Added(it->second);
  return Ok();
}

bool Scheduler::Cancel(RequestId id) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return false;
  Removed(it->second);
  pending_.erase(it);
  return true;
}

bool Scheduler::CouldChangeAPass(RequestId id) const {
  auto it = pending_.find(id);
  if (it == pending_.end()) return false;
  if (!last_pass_.valid) return true;
  const Pending& pending = it->second;
  const Tenancy& tenancy = tenancies_[pending.tenancy];
  const int gpus = pending.request.gpus;
  const bool fair = options_.mode == Mode::kFair;
  // A tenancy that had no work: every target share, and so every reservation that yields to a
  // tenancy below its share, may move.
  if (tenancy.queue.size() == 1 && tenancy.in_use == 0 && tenancy.other_gpus <= 0) return true;
  // Held back by its GPU quota, it waits whatever else is pending.
  if (fair && tenancy.in_use + tenancy.other_gpus + gpus > tenancy.policy.quota_gpus) return false;
  // The GPUs the last pass left visible may take it.
  if (gpus <= last_pass_.free_visible && !last_pass_.no_fit[gpus]) return true;
  // Reserved GPUs it ends in time for may take it.
  if (last_pass_.free_hidden > 0 && pending.request.max_duration_s != kUnknownTime &&
      gpus <= last_pass_.free_visible + last_pass_.free_hidden) {
    const double ends = last_pass_.now_s + pending.request.max_duration_s;
    if (ends < last_pass_.backfill_failed_end[gpus] && ends <= last_pass_.latest_ready_s)
      return true;
  }
  // It may get a reservation of its own.
  if (static_cast<int>(kept_.size()) < options_.max_reservations &&
      !last_pass_.reserve_failed[gpus])
    return true;
  if (kept_.empty() || !fair) return false;  // FIFO: the newest request comes last
  // Ahead of a reservation's holder in the order, it would take the reservation over. Placed
  // before requests of its own tenancy (a higher priority), it is hard to tell: a pass decides.
  const auto last = tenancy.queue.rbegin();
  if (std::get<3>(*last) != id) return true;
  const double key = ShareKey(tenancy, static_cast<double>(tenancy.pending_gpus - gpus));
  for (const Reservation& kept : kept_) {
    if (kept.holder_tenancy < 0 || kept.holder_tenancy >= static_cast<int>(tenancies_.size()))
      return true;
    const double holder_key = ShareKey(tenancies_[kept.holder_tenancy], kept.holder_walked_gpus);
    if (key < holder_key || (key == holder_key && pending.tenancy < kept.holder_tenancy))
      return true;
  }
  return false;
}

void Scheduler::EnsureNodes(const Fleet& fleet) {
  if (static_cast<int>(gpu_ends_.size()) == fleet.node_count()) return;
  gpu_ends_.resize(fleet.node_count());
  gpu_owner_.resize(fleet.node_count());
  for (int node = 0; node < fleet.node_count(); ++node) {
    gpu_ends_[node].resize(fleet.node(node).gpu_count, kUnknownTime);
    gpu_owner_[node].resize(fleet.node(node).gpu_count, 0);
  }
}

void Scheduler::SetGpuOwner(const Placement& placement, double ends_s, RequestId owner) {
  if (placement.node < 0) return;
  if (placement.node >= static_cast<int>(gpu_ends_.size())) {
    gpu_ends_.resize(placement.node + 1);
    gpu_owner_.resize(placement.node + 1);
  }
  auto& ends = gpu_ends_[placement.node];
  auto& owners = gpu_owner_[placement.node];
  for (GpuMask m = placement.gpus; m; m &= m - 1) {
    const size_t gpu = __builtin_ctzll(m);
    if (gpu >= ends.size()) {
      ends.resize(gpu + 1, kUnknownTime);
      owners.resize(gpu + 1, 0);
    }
    ends[gpu] = ends_s;
    owners[gpu] = owner;
  }
}

void Scheduler::Started(RequestId id, const std::string& tenancy, const Placement& placement,
                        int gpus, double started_s, double max_duration_s, int priority,
                        bool preemptible) {
  Advance(started_s);
  Cancel(id);
  const bool counted = running_.count(id) > 0;
  if (counted) Finished(id, started_s);
  // Adopted after a restart: what it ran before this scheduler's time counts too.
  if (!counted) ChargePast(tenancy, gpus, started_s, now_s_);
  Running running;
  running.tenancy = TenancyIndex(tenancy);
  running.placement = placement;
  running.gpus = gpus;
  running.started_s = started_s;
  running.ends_s = max_duration_s == kUnknownTime ? kUnknownTime : started_s + max_duration_s;
  running.priority = priority;
  running.preemptible = preemptible;
  tenancies_[running.tenancy].in_use += gpus;
  SetGpuOwner(placement, running.ends_s, id);
  running_.emplace(id, std::move(running));
}

bool Scheduler::Finished(RequestId id, double now_s, double ended_s) {
  auto it = running_.find(id);
  if (it == running_.end()) return false;
  Advance(now_s);
  Tenancy& tenancy = tenancies_[it->second.tenancy];
  tenancy.in_use -= it->second.gpus;
  if (ended_s != kUnknownTime && ended_s < now_s_)
    ChargePast(tenancy.name, -it->second.gpus, std::max(ended_s, it->second.started_s), now_s_);
  SetGpuOwner(it->second.placement, kUnknownTime, 0);
  running_.erase(it);
  return true;
}

namespace {

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

PassResult Scheduler::Schedule(Fleet& fleet, double now_s, bool report) {
  Advance(now_s);
  EnsureNodes(fleet);
  PassResult result;
  if (pending_.empty()) {
    kept_.clear();
    last_pass_.valid = false;  // the next arrival is a change
    return result;
  }
  const bool fair = options_.mode == Mode::kFair;

  HiddenGpus hidden(fleet);
  std::vector<GpuMask> reserved(fleet.node_count(), 0);
  int free_visible = fleet.free_gpus();
  // Per size: 1 when nothing visible fits (stays true: a pass only takes GPUs away), and
  // whether the size can ever be placed (-1 unknown).
  std::array<bool, kMaxSize + 1> no_fit{};
  // Per size: the earliest end that found no reserved GPUs to backfill into. A later request of
  // that size ending no earlier finds none either: reserved GPUs a pass hides only ever come
  // from capacity it could not use, and backfill only takes them away.
  std::array<double, kMaxSize + 1> backfill_failed_end;
  backfill_failed_end.fill(kUnknownTime);
  std::array<int, kMaxSize + 1> placeable;
  placeable.fill(-1);
  int position = 0;

  // Reservations of the last pass whose holders still wait keep their GPUs, with their time
  // worked out again from what runs there now.
  std::unordered_map<RequestId, int> held;  // holder -> index into result.reservations
  std::vector<bool> released;               // per reservation: its holder started
  // Fair: a tenancy above its share keeps no reservation while a tenancy further below its
  // share waits; kept, the reservation would start its requests ahead of the fair order (a
  // flood's reservations would hold every GPU that frees for it).
  std::vector<bool> yields(tenancies_.size(), false);
  if (fair) {
    const std::vector<TenancyUsage> usage = Usage();
    double lowest_waiting = kUnknownTime;
    for (size_t t = 0; t < tenancies_.size(); ++t)
      if (!tenancies_[t].queue.empty())
        lowest_waiting = std::min(lowest_waiting, ShareKey(tenancies_[t], 0));
    for (size_t t = 0; t < tenancies_.size(); ++t)
      yields[t] = usage[t].share > usage[t].target && ShareKey(tenancies_[t], 0) > lowest_waiting;
  }
  for (const Reservation& kept : kept_) {
    auto it = pending_.find(kept.holder);
    if (it == pending_.end() || kept.node >= fleet.node_count()) continue;
    const Tenancy& owner = tenancies_[it->second.tenancy];
    if (fair && owner.in_use + owner.other_gpus + it->second.request.gpus > owner.policy.quota_gpus)
      continue;
    if (yields[it->second.tenancy]) continue;
    if (kept.gpus & reserved[kept.node]) continue;
    Reservation again = kept;
    again.ready_s = now_s;
    bool usable = true;
    for (GpuMask m = kept.gpus; m; m &= m - 1) {
      const int gpu = __builtin_ctzll(m);
      if (gpu >= fleet.node(kept.node).gpu_count) {
        usable = false;
        break;
      }
      if ((fleet.free_mask(kept.node) >> gpu) & 1) continue;
      const placement::GpuState state = fleet.state(kept.node, gpu);
      if (state == placement::GpuState::kQuarantined || state == placement::GpuState::kDraining) {
        usable = false;
        break;
      }
      const bool known = state == placement::GpuState::kLeased && gpu_owner_[kept.node][gpu] != 0;
      again.ready_s = std::max(again.ready_s, known ? gpu_ends_[kept.node][gpu] : kUnknownTime);
    }
    if (!usable) continue;
    reserved[again.node] |= again.gpus;
    free_visible -= hidden.Hide(again.node, again.gpus);
    held[again.holder] = static_cast<int>(result.reservations.size());
    result.reservations.push_back(again);
    released.push_back(false);
  }

  auto admit = [&](Pending& pending, const Placement& placement, bool backfill) {
    result.admitted.push_back({pending.request.id, placement, backfill});
    const PendingRequest& r = pending.request;
    free_visible -= backfill ? 0 : r.gpus;
    Running running;
    running.tenancy = pending.tenancy;
    running.placement = placement;
    running.gpus = r.gpus;
    running.started_s = now_s;
    running.ends_s = r.max_duration_s == kUnknownTime ? kUnknownTime : now_s + r.max_duration_s;
    running.priority = r.priority;
    running.preemptible = r.preemptible;
    tenancies_[pending.tenancy].in_use += r.gpus;
    SetGpuOwner(placement, running.ends_s, r.id);
    running_.emplace(r.id, std::move(running));
  };

  // Holders whose reserved GPUs are free start first, on them, before anything else is walked:
  // otherwise the next request of the same tenancy would reserve the GPUs they leave in the same
  // pass, and a tenancy could hold a node from one of its requests to the next.
  for (size_t i = 0; i < result.reservations.size(); ++i) {
    Reservation& mine = result.reservations[i];
    Pending& pending = pending_.at(mine.holder);
    Placement placement;
    if (!PlaceOnNode(fleet, mine.node, hidden.hidden(mine.node) & mine.gpus, pending.request.gpus,
                     &placement)) {
      continue;
    }
    ++result.decisions;
    hidden.Show(mine.node, mine.gpus);
    (void)fleet.SetFreeMask(mine.node, fleet.free_mask(mine.node) & ~placement.gpus);
    reserved[mine.node] &= ~mine.gpus;
    released[i] = true;
    held.erase(mine.holder);
    admit(pending, placement, false);
    Removed(pending);
    pending_.erase(mine.holder);
  }
  free_visible = fleet.free_gpus() - hidden.total();

  // When the walk may stop (without report): once no pending request could start or reserve.
  // Per size, what the walk found out (monotone while nothing is admitted: a pass only takes
  // GPUs away and adds reservations); and per size how many tenancies not held back by their
  // GPU quota have requests of that size waiting.
  std::array<bool, kMaxSize + 1> reserve_failed{};
  std::array<int, kMaxSize + 1> live_sizes{};
  std::vector<int> live_up_to(tenancies_.size(), 0);  // per tenancy: its largest live size
  auto count_live = [&](size_t t, int sign) {
    const Tenancy& tenancy = tenancies_[t];
    int up_to = kMaxSize;
    if (fair && tenancy.policy.quota_gpus != kUnlimited)
      up_to = static_cast<int>(
          std::floor(tenancy.policy.quota_gpus - tenancy.in_use - tenancy.other_gpus + 1e-9));
    up_to = std::clamp(up_to, 0, kMaxSize);
    if (sign < 0) up_to = live_up_to[t];
    for (int size = 1; size <= up_to; ++size)
      if (tenancy.pending_by_size[size]) live_sizes[size] += sign;
    live_up_to[t] = up_to;
  };
  if (!report) {
    for (size_t t = 0; t < tenancies_.size(); ++t)
      if (!tenancies_[t].queue.empty()) count_live(t, 1);
  }
  size_t holders_left = held.size();
  auto may_change = [&]() {
    if (holders_left > 0) return true;
    const bool reservations_full =
        static_cast<int>(result.reservations.size()) >= options_.max_reservations;
    const int hidden_free = hidden.total();
    double latest_ready = -kUnknownTime;
    for (const Reservation& r : result.reservations)
      if (r.ready_s != kUnknownTime) latest_ready = std::max(latest_ready, r.ready_s);
    for (int size = 1; size <= kMaxSize; ++size) {
      if (live_sizes[size] <= 0) continue;
      if (size <= free_visible && !no_fit[size]) return true;
      if (!reservations_full && !reserve_failed[size]) return true;
      const auto& durations = limited_durations_[size];
      if (hidden_free > 0 && !durations.empty() && size <= free_visible + hidden_free) {
        const double ends = now_s + *durations.begin();
        if (ends < backfill_failed_end[size] && ends <= latest_ready) return true;
      }
    }
    return false;
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
  std::priority_queue<Cursor, std::vector<Cursor>, std::greater<>> order;
  std::vector<decltype(Tenancy::queue)::iterator> next(tenancies_.size());
  std::vector<double> walked_gpus(tenancies_.size(), 0);
  auto head_key = [&](int t) {
    if (fair) return ShareKey(tenancies_[t], walked_gpus[t]);
    return static_cast<double>(std::get<2>(*next[t]));
  };
  for (size_t t = 0; t < tenancies_.size(); ++t) {
    next[t] = tenancies_[t].queue.begin();
    if (next[t] != tenancies_[t].queue.end()) {
      order.push({head_key(static_cast<int>(t)), static_cast<int>(t)});
    }
  }

  while (!order.empty()) {
    const int t = order.top().tenancy;
    order.pop();
    Tenancy& tenancy = tenancies_[t];
    const auto entry = next[t]++;
    const RequestId id = std::get<3>(*entry);
    Pending& pending = pending_.at(id);
    const int gpus = pending.request.gpus;
    ++result.decisions;

    Wait wait;
    wait.id = id;
    int& can = placeable[gpus];
    if (can < 0) can = fleet.CanEverPlace(gpus).ok() ? 1 : 0;
    bool admitted = false;
    if (!can) {
      wait.kind = WaitKind::kNeverPlaceable;
      reserve_failed[gpus] = true;
    } else if (fair && tenancy.in_use + tenancy.other_gpus + gpus > tenancy.policy.quota_gpus) {
      wait.kind = WaitKind::kQuotaGpus;
      wait.in_use = tenancy.in_use + tenancy.other_gpus;
      wait.quota = tenancy.policy.quota_gpus;
    } else if (auto own = held.find(id); own != held.end()) {
      // A holder starts on its own reserved GPUs (or anywhere else that fits now), or keeps
      // waiting for them.
      --holders_left;
      Reservation& mine = result.reservations[own->second];
      mine.holder_tenancy = t;
      mine.holder_walked_gpus = walked_gpus[t];
      Placement placement;
      admitted = hidden.PlaceWith(mine.node, mine.gpus, gpus, options_.placement, &placement) ||
                 (!no_fit[gpus] && free_visible >= gpus &&
                  fleet.TryPlace(gpus, options_.placement, &placement));
      if (admitted) {
        admit(pending, placement, false);
        // Its reservation ends: what it did not use goes back to everyone.
        reserved[mine.node] &= ~mine.gpus;
        hidden.Show(mine.node, mine.gpus);
        released[own->second] = true;
        free_visible = fleet.free_gpus() - hidden.total();
      } else {
        wait.kind = WaitKind::kReservation;
        wait.reservation = own->second;
      }
    } else {
      Placement placement;
      if (!no_fit[gpus]) {
        if (free_visible >= gpus && fleet.TryPlace(gpus, options_.placement, &placement)) {
          admit(pending, placement, false);
          admitted = true;
        } else {
          no_fit[gpus] = true;
        }
      }
      // Backfill into reserved GPUs: only a request that ends before the reservation needs them.
      if (!admitted && hidden.total() > 0 && pending.request.max_duration_s != kUnknownTime &&
          now_s + pending.request.max_duration_s < backfill_failed_end[gpus]) {
        const double ends = now_s + pending.request.max_duration_s;
        for (size_t i = 0; i < result.reservations.size() && !admitted; ++i) {
          const Reservation& r = result.reservations[i];
          if (r.ready_s == kUnknownTime || ends > r.ready_s) continue;
          // Every reservation on that node this request would not delay.
          GpuMask allowed = 0;
          for (const Reservation& other : result.reservations) {
            if (other.node == r.node && other.ready_s != kUnknownTime && ends <= other.ready_s)
              allowed |= other.gpus;
          }
          if (!FitsIn(fleet, r.node, fleet.free_mask(r.node) | (hidden.hidden(r.node) & allowed),
                      gpus))
            continue;
          if (hidden.PlaceWith(r.node, allowed, gpus, options_.placement, &placement)) {
            admit(pending, placement, true);
            admitted = true;
          }
        }
        if (!admitted) backfill_failed_end[gpus] = std::min(backfill_failed_end[gpus], ends);
      }
      if (!admitted) {
        Reservation reservation;
        if (static_cast<int>(result.reservations.size()) < options_.max_reservations &&
            ChooseReservation(fleet, gpus, reserved, now_s, &reservation)) {
          reservation.holder = id;
          reservation.holder_tenancy = t;
          reservation.holder_walked_gpus = walked_gpus[t];
          reserved[reservation.node] |= reservation.gpus;
          free_visible -= hidden.Hide(reservation.node, reservation.gpus);
          wait.kind = WaitKind::kReservation;
          wait.reservation = static_cast<int>(result.reservations.size());
          result.reservations.push_back(reservation);
          released.push_back(false);
        } else {
          if (static_cast<int>(result.reservations.size()) < options_.max_reservations)
            reserve_failed[gpus] = true;
          wait.kind = WaitKind::kNoCapacity;
          wait.free_gpus = free_visible;
          // Reserved for someone else when it would fit with a reservation's GPUs shown.
          for (size_t i = 0; i < result.reservations.size(); ++i) {
            const Reservation& r = result.reservations[i];
            if (FitsIn(fleet, r.node, fleet.free_mask(r.node) | hidden.hidden(r.node), gpus)) {
              wait.kind = WaitKind::kReserved;
              wait.reservation = static_cast<int>(i);
              break;
            }
          }
        }
      }
    }
    if (!admitted) {
      walked_gpus[t] += gpus;
      wait.position = ++position;
      if (report) result.waiting.push_back(wait);
    } else {
      if (!report) count_live(static_cast<size_t>(t), -1);
      Removed(pending);
      pending_.erase(id);
      // Its start changed what is running: a reservation that could not be chosen before may
      // be now, and its tenancy's room under its GPU quota shrank.
      reserve_failed.fill(false);
      if (!report && !tenancy.queue.empty()) count_live(static_cast<size_t>(t), 1);
    }
    if (next[t] != tenancy.queue.end()) order.push({head_key(t), t});
    if (!report && !may_change()) {
      result.stopped_early = !order.empty();
      break;
    }
  }
  last_pass_.valid = true;
  last_pass_.now_s = now_s;
  last_pass_.free_visible = fleet.free_gpus() - hidden.total();
  last_pass_.free_hidden = hidden.total();
  last_pass_.no_fit = no_fit;
  last_pass_.backfill_failed_end = backfill_failed_end;
  last_pass_.reserve_failed = reserve_failed;
  hidden.ShowAll();
  kept_.clear();
  last_pass_.latest_ready_s = -kUnknownTime;
  for (size_t i = 0; i < result.reservations.size(); ++i) {
    if (released[i]) continue;
    kept_.push_back(result.reservations[i]);
    if (result.reservations[i].ready_s != kUnknownTime)
      last_pass_.latest_ready_s =
          std::max(last_pass_.latest_ready_s, result.reservations[i].ready_s);
  }
  if (options_.preemption) {
    result.preemptions = ChoosePreemptions(fleet, result, reserved, now_s);
  }
  return result;
}

}  // namespace tessera::scheduling

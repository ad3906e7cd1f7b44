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

}  // namespace tessera::scheduling

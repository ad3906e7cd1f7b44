// The MIG fleet simulator: events (arrivals, ends) in time order; after each, one pass over the
// waiting requests of each kind (FIFO with backfill: whole, then mig, then share).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <map>
#include <queue>
#include <tuple>

#include "placement/mig_fleet_state.h"

namespace tessera::placement {
namespace {

struct Ending {
  double end = 0;
  size_t request = 0;
  bool operator>(const Ending& other) const {
    return end != other.end ? end > other.end : request > other.request;
  }
};

double Percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  size_t index = static_cast<size_t>(std::ceil(q * values.size()));
  index = std::clamp<size_t>(index, 1, values.size()) - 1;
  std::nth_element(values.begin(), values.begin() + index, values.end());
  return values[index];
}

// Waiting requests of one kind by class (whole: GPU count; mig: profile; share: memory and
// compute), each class in arrival order.
using ClassKey = std::tuple<int, std::string, double, double>;
using Classes = std::map<ClassKey, std::deque<size_t>>;

ClassKey KeyOf(const MigTraceRequest& r) {
  switch (r.kind) {
    case MigRequestKind::kWhole:
      return {r.gpus, "", 0, 0};
    case MigRequestKind::kMig:
      return {0, r.profile, 0, 0};
    case MigRequestKind::kShare:
      return {0, "", r.share_memory_gib, r.share_compute};
  }
  return {};
}

class Simulation {
 public:
  Simulation(const std::vector<MigTraceRequest>& trace, MigFleetState state, double horizon,
             bool time_decisions)
      : trace_(trace), state_(std::move(state)), horizon_(horizon), timed_(time_decisions) {
    order_.resize(trace.size());
    for (size_t i = 0; i < order_.size(); ++i)
      order_[i] = i;
    std::stable_sort(order_.begin(), order_.end(),
                     [&](size_t a, size_t b) { return trace[a].arrival_s < trace[b].arrival_s; });
    sequence_.resize(trace.size());
    for (size_t i = 0; i < order_.size(); ++i)
      sequence_[order_[i]] = i;
    start_.assign(trace.size(), -1);
    never_placeable_.assign(trace.size(), false);
    placed_.resize(trace.size());
  }

  MigSimResult Run();

 private:
  void PassKind(MigRequestKind kind, double now);
  bool Hopeless(MigRequestKind kind, const ClassKey& key) const;
  bool Place(size_t request);
  void Started(size_t request, double now);
  MigSimResult Figures() const;

  const std::vector<MigTraceRequest>& trace_;
  MigFleetState state_;
  double horizon_;
  bool timed_;
  std::vector<size_t> order_, sequence_;
  std::vector<double> start_;
  std::vector<MigWork> placed_;
  Classes waiting_[3];
  std::priority_queue<Ending, std::vector<Ending>, std::greater<Ending>> ending_;
  double gpu_seconds_ = 0, gpu_seconds_by_kind_[3] = {0, 0, 0};
  int64_t never_ = 0;
  std::vector<bool> never_placeable_;
  std::vector<double> decision_us_;
  // Classes that found no room: they stay so until something ends (placements only take room).
  std::vector<ClassKey> failed_[3];
};

MigSimResult Simulation::Run() {
  size_t next = 0;
  while (true) {
    double now = horizon_ + 1;
    if (next < order_.size()) now = trace_[order_[next]].arrival_s;
    if (!ending_.empty()) now = std::min(now, ending_.top().end);
    if (now > horizon_) break;
    while (!ending_.empty() && ending_.top().end <= now) {
      state_.Release(placed_[ending_.top().request]);
      ending_.pop();
      for (auto& failed : failed_)
        failed.clear();
    }
    while (next < order_.size() && trace_[order_[next]].arrival_s <= now) {
      size_t request = order_[next++];
      if (!state_.EverPlaceable(trace_[request])) {
        ++never_;
        never_placeable_[request] = true;
        continue;
      }
      waiting_[static_cast<int>(trace_[request].kind)][KeyOf(trace_[request])].push_back(request);
    }
    for (MigRequestKind kind :
         {MigRequestKind::kWhole, MigRequestKind::kMig, MigRequestKind::kShare})
      PassKind(kind, now);
  }
  return Figures();
}

// A class no request of which can start now: it, or a class it needs at least as much as, failed.
bool Simulation::Hopeless(MigRequestKind kind, const ClassKey& key) const {
  for (const ClassKey& failed : failed_[static_cast<int>(kind)]) {
    switch (kind) {
      case MigRequestKind::kWhole:
        if (std::get<0>(key) >= std::get<0>(failed)) return true;
        break;
      case MigRequestKind::kMig:
        if (std::get<1>(key) == std::get<1>(failed)) return true;
        break;
      case MigRequestKind::kShare:
        if (std::get<2>(key) >= std::get<2>(failed) && std::get<3>(key) >= std::get<3>(failed))
          return true;
        break;
    }
  }
  return false;
}

bool Simulation::Place(size_t request) {
  const MigTraceRequest& r = trace_[request];
  switch (r.kind) {
    case MigRequestKind::kWhole:
      return state_.PlaceWhole(request, r.gpus, placed_[request]);
    case MigRequestKind::kShare:
      return state_.PlaceShare(r.share_memory_gib, r.share_compute, placed_[request]);
    case MigRequestKind::kMig:
      break;
  }
  auto begin = std::chrono::steady_clock::now();
  bool placed = state_.PlaceMig(request, r.profile, placed_[request]);
  if (timed_) {
    std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - begin;
    decision_us_.push_back(took.count());
  }
  return placed;
}

// FIFO with backfill: the waiting requests of one kind in arrival order, each started when it
// fits; classes that cannot start now are skipped whole.
void Simulation::PassKind(MigRequestKind kind, double now) {
  Classes& classes = waiting_[static_cast<int>(kind)];
  using Head = std::pair<size_t, Classes::iterator>;  // arrival position of the class's first
  auto later = [](const Head& a, const Head& b) { return a.first > b.first; };
  std::priority_queue<Head, std::vector<Head>, decltype(later)> heads(later);
  for (auto it = classes.begin(); it != classes.end(); ++it)
    if (!Hopeless(kind, it->first)) heads.push({sequence_[it->second.front()], it});
  while (!heads.empty()) {
    auto it = heads.top().second;
    heads.pop();
    if (Hopeless(kind, it->first)) continue;
    const size_t request = it->second.front();
    if (!Place(request)) {
      failed_[static_cast<int>(kind)].push_back(it->first);
      continue;
    }
    Started(request, now);
    it->second.pop_front();
    if (!it->second.empty()) heads.push({sequence_[it->second.front()], it});
  }
  for (auto it = classes.begin(); it != classes.end();)
    it = it->second.empty() ? classes.erase(it) : std::next(it);
}

void Simulation::Started(size_t request, double now) {
  const MigTraceRequest& r = trace_[request];
  start_[request] = now;
  const double seconds = state_.Fraction(r) * (std::min(now + r.duration_s, horizon_) - now);
  gpu_seconds_ += seconds;
  gpu_seconds_by_kind_[static_cast<int>(r.kind)] += seconds;
  ending_.push({now + r.duration_s, request});
}

MigSimResult Simulation::Figures() const {
  MigSimResult result;
  result.horizon_s = horizon_;
  result.requests = static_cast<int64_t>(trace_.size());
  result.never_placeable = never_;
  std::vector<double> waits, waits_by_kind[3];
  for (size_t i = 0; i < trace_.size(); ++i) {
    if (trace_[i].arrival_s > horizon_) continue;
    const int kind = static_cast<int>(trace_[i].kind);
    if (start_[i] >= 0) {
      ++result.started;
      waits.push_back(start_[i] - trace_[i].arrival_s);
    } else {
      if (!never_placeable_[i]) {
        ++result.waiting_at_end;
        ++result.waiting_by_kind[kind];
      }
      waits.push_back(horizon_ - trace_[i].arrival_s);
    }
    waits_by_kind[kind].push_back(waits.back());
  }
  result.wait_p50_s = Percentile(waits, 0.50);
  result.wait_p95_s = Percentile(waits, 0.95);
  for (int kind = 0; kind < 3; ++kind) {
    result.wait_p95_s_by_kind[kind] = Percentile(waits_by_kind[kind], 0.95);
    result.gpu_hours_by_kind[kind] = gpu_seconds_by_kind_[kind] / 3600;
  }
  result.gpu_hours = gpu_seconds_ / 3600;
  const double hours = horizon_ / 3600;
  if (hours > 0) result.utilization = result.gpu_hours / (state_.gpu_count() * hours);
  result.instances_created = state_.created();
  result.instances_destroyed = state_.destroyed();
  result.mode_changes = state_.mode_changes();
  if (hours > 0) {
    result.reconfigurations_per_hour =
        (result.instances_created + result.instances_destroyed + result.mode_changes) / hours;
  }
  result.decision_us = decision_us_;
  return result;
}

}  // namespace

Result<MigSimResult> SimulateMigFleet(const std::vector<MigTraceRequest>& trace,
                                      const MigSimOptions& options) {
  auto state = MigFleetState::Create(options);
  if (!state) return state.error();
  double horizon = options.horizon_s;
  if (horizon <= 0) {
    for (const MigTraceRequest& r : trace)
      horizon = std::max(horizon, r.arrival_s);
  }
  Simulation simulation(trace, std::move(*state), horizon, options.time_decisions);
  return simulation.Run();
}

}  // namespace tessera::placement

// The fleet simulator with tenancies. FIFO replays placement::Simulate's queue exactly (FIFO
// with backfill, no reservation); fair runs the Scheduler. Both report per-tenancy waits,
// shares and Jain's index from the same start times.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <queue>

#include "scheduling/scheduling.h"

namespace tessera::scheduling {

using placement::Placement;
using placement::Request;

Result<std::vector<Request>> SyntheticTenantTrace(const placement::SyntheticOptions& base,
                                                  const std::vector<TenantLoad>& tenants) {
  if (tenants.empty() || tenants.size() > 1000) {
    return InvalidArgument("tenants: expected 1..1000");
  }
  double total_load = 0;
  for (const TenantLoad& tenant : tenants) {
    if (!(tenant.load > 0 && tenant.load <= 100)) {
      return InvalidArgument("tenant " + tenant.name + ": load must be within (0, 100]");
    }
    total_load += tenant.load;
  }
  std::vector<Request> merged;
  for (size_t i = 0; i < tenants.size(); ++i) {
    placement::SyntheticOptions options = base;
    options.load = tenants[i].load;
    // Splitting requests by load gives every tenant the same arrival window.
    options.requests = static_cast<int>(std::llround(base.requests * tenants[i].load / total_load));
    options.seed = base.seed * 1000003 + i + 1;
    auto trace = placement::SyntheticTrace(options);
    if (!trace) return trace.error().WithContext("tenant " + tenants[i].name);
    for (Request& r : *trace) {
      r.tenancy = tenants[i].name;
      merged.push_back(std::move(r));
    }
  }
  std::stable_sort(merged.begin(), merged.end(),
                   [](const Request& a, const Request& b) { return a.arrival_s < b.arrival_s; });
  return merged;
}

namespace {

double Round6(double value) {
  return std::round(value * 1e6) / 1e6;
}

// Nearest rank.
double Percentile(std::vector<double>& values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  size_t rank = static_cast<size_t>(std::ceil(q * values.size()));
  return values[std::clamp<size_t>(rank, 1, values.size()) - 1];
}

struct Departure {
  double time;
  int64_t sequence;
  size_t index;
  Placement placement;
};
struct Later {
  bool operator()(const Departure& a, const Departure& b) const {
    return a.time != b.time ? a.time > b.time : a.sequence > b.sequence;
  }
};

// The fair run: events in time order, departures first at equal times, one pass per instant.
Result<placement::SimulationResult> SimulateFair(placement::Fleet fleet,
                                                 const std::vector<Request>& requests,
                                                 const QueueSimulationOptions& options,
                                                 std::vector<double>& starts) {
  auto scheduler = Scheduler::Create(options.scheduler);
  if (!scheduler) return scheduler.error();
  for (const auto& [name, policy] : options.tenancies) {
    if (auto set = scheduler->SetTenancy(name, policy); !set) {
      return set.error().WithContext("tenancy " + name);
    }
  }
  placement::SimulationResult result;
  result.policy = placement::PolicyName(options.scheduler.placement);
  result.nodes = fleet.node_count();
  result.gpus = fleet.total_gpus();
  result.queue = true;
  result.requests = static_cast<int64_t>(requests.size());
  starts.assign(requests.size(), NAN);
  if (requests.empty()) return result;

  placement::SimulationMeter meter(requests);
  std::priority_queue<Departure, std::vector<Departure>, Later> departures;
  int64_t sequence = 0;
  std::array<int, 65> possible;
  possible.fill(-1);

  size_t next = 0;
  while (next < requests.size() || !departures.empty()) {
    const double now = next < requests.size() && (departures.empty() ||
                                                  requests[next].arrival_s < departures.top().time)
                           ? requests[next].arrival_s
                           : departures.top().time;
    while (!departures.empty() && departures.top().time <= now) {
      Departure d = departures.top();
      departures.pop();
      meter.Advance(d.time);
      meter.Ended(requests[d.index].gpus);
      (void)fleet.Release(d.placement);
      scheduler->Finished(d.index + 1, d.time);
    }
    meter.Advance(now);
    for (; next < requests.size() && requests[next].arrival_s <= now; ++next) {
      const Request& r = requests[next];
      result.offered_gpu_hours += r.gpus * r.duration_s / 3600.0;
      ++result.requests_by_size[r.gpus];
      int& can = possible[std::min(r.gpus, 64)];
      if (can < 0) can = fleet.CanEverPlace(r.gpus).ok() ? 1 : 0;
      if (!can) {
        ++result.never_placeable;
        ++result.rejected;
        continue;
      }
      PendingRequest pending;
      pending.id = next + 1;
      pending.tenancy = r.tenancy;
      pending.gpus = r.gpus;
      pending.submitted_s = r.arrival_s;
      pending.max_duration_s = options.duration_limits ? r.duration_s : kUnknownTime;
      if (auto queued = scheduler->Enqueue(std::move(pending)); !queued) return queued.error();
    }
    if (scheduler->pending_count() == 0) continue;
    PassResult pass = scheduler->Schedule(fleet, now, /*report=*/false);
    result.decisions += pass.decisions;
    for (const Admission& admission : pass.admitted) {
      const size_t index = admission.id - 1;
      const Request& r = requests[index];
      ++result.admitted;
      ++result.admitted_by_size[r.gpus];
      result.served_gpu_hours += r.gpus * r.duration_s / 3600.0;
      starts[index] = now;
      meter.Started(r.gpus, now - r.arrival_s);
      departures.push({now + r.duration_s, sequence++, index, admission.placement});
    }
  }
  result.rejected += static_cast<int64_t>(scheduler->pending_count());
  meter.Finish(requests, result);
  return result;
}

Status CheckTenantTrace(const std::vector<Request>& requests) {
  for (size_t i = 0; i < requests.size(); ++i) {
    const Request& r = requests[i];
    if (!(r.arrival_s >= 0) || !std::isfinite(r.arrival_s) || !(r.duration_s > 0) ||
        !std::isfinite(r.duration_s) || r.gpus < 1 || r.gpus > 64) {
      return InvalidArgument("request " + std::to_string(i) +
                             ": needs arrival_s >= 0, duration_s > 0 and gpus 1..64");
    }
  }
  return Ok();
}

// The run in the scheduler's mode: each request's start time (NaN: never started) in `starts`.
Result<placement::SimulationResult> RunTrace(placement::Fleet fleet,
                                             const std::vector<Request>& requests,
                                             const QueueSimulationOptions& options,
                                             std::vector<double>& starts) {
  if (options.scheduler.mode != Mode::kFifo)
    return SimulateFair(std::move(fleet), requests, options, starts);
  placement::SimulationOptions sim;
  sim.policy = options.scheduler.placement;
  sim.queue = true;
  sim.start_times = &starts;
  return placement::Simulate(std::move(fleet), requests, sim);
}

// Per tenancy: waits of admitted requests, served GPU-hours, and how long it had a request
// waiting within the arrival window (for "stayed backlogged").
struct TenancyTally {
  TenancyStats stats;
  std::vector<double> waits;
  std::map<int, std::vector<double>> waits_by_size;
  std::vector<std::pair<double, int>> backlog_events;  // (time, +1 arrival / -1 start)
};

// What the run's start times say, per tenancy and per size. Shares are of the GPU-time leased
// within the arrival window, while tenancies compete; after it the queue only drains, and every
// tenancy ends up with all it asked for.
struct RunTally {
  std::map<std::string, TenancyTally> tenants;
  std::map<int, std::vector<double>> waits_by_size;
  double window_start = 0;
  double window_end = 0;
  std::map<std::string, double> window_gpu_seconds, offered_window_gpu_seconds;
  double window_total = 0;

  double InsideWindow(double from, double to) const {
    return std::max(0.0, std::min(to, window_end) - std::max(from, window_start));
  }
};

RunTally TallyRun(const std::vector<Request>& requests, const std::vector<double>& starts) {
  RunTally tally;
  tally.window_start = requests.empty() ? 0 : requests.front().arrival_s;
  tally.window_end = requests.empty() ? 0 : requests.back().arrival_s;
  for (size_t i = 0; i < requests.size(); ++i) {
    const Request& r = requests[i];
    TenancyTally& a = tally.tenants[r.tenancy];
    ++a.stats.requests;
    a.backlog_events.push_back({r.arrival_s, +1});
    tally.offered_window_gpu_seconds[r.tenancy] +=
        r.gpus * tally.InsideWindow(r.arrival_s, r.arrival_s + r.duration_s);
    if (std::isnan(starts[i])) continue;
    ++a.stats.admitted;
    const double wait = starts[i] - r.arrival_s;
    a.waits.push_back(wait);
    a.waits_by_size[r.gpus].push_back(wait);
    tally.waits_by_size[r.gpus].push_back(wait);
    a.stats.gpu_hours += r.gpus * r.duration_s / 3600.0;
    const double inside = tally.InsideWindow(starts[i], starts[i] + r.duration_s);
    tally.window_gpu_seconds[r.tenancy] += r.gpus * inside;
    tally.window_total += r.gpus * inside;
    a.backlog_events.push_back({starts[i], -1});
  }
  return tally;
}

// Time with at least one request waiting, clipped to the arrival window. A start at the same
// instant as its arrival sorts first (-1 < +1) and so adds no time.
double BackloggedSeconds(std::vector<std::pair<double, int>>& events, double window_start,
                         double window_end) {
  std::sort(events.begin(), events.end());
  int waiting = 0;
  double backlogged = 0, since = 0;
  for (const auto& [time, delta] : events) {
    if (waiting > 0) {
      backlogged += std::max(0.0, std::min(time, window_end) - std::max(since, window_start));
    }
    waiting += delta;
    since = time;
  }
  return backlogged;
}

// Each tenancy's figures into `out`, with the backlogged ones and Jain's index of their
// weighted shares.
void Summarize(RunTally& tally, const QueueSimulationOptions& options, QueueSimulationResult& out) {
  std::vector<double> normalized;
  for (auto& [name, a] : tally.tenants) {
    TenancyStats& s = a.stats;
    s.share = tally.window_total > 0 ? tally.window_gpu_seconds[name] / tally.window_total : 0;
    s.wait_max_s = a.waits.empty() ? 0 : *std::max_element(a.waits.begin(), a.waits.end());
    s.wait_p50_s = Percentile(a.waits, 0.50);
    s.wait_p95_s = Percentile(a.waits, 0.95);
    for (auto& [size, waits] : a.waits_by_size)
      s.wait_p95_s_by_size[size] = Percentile(waits, 0.95);
    const double backlogged =
        BackloggedSeconds(a.backlog_events, tally.window_start, tally.window_end);
    const double window = tally.window_end - tally.window_start;
    s.backlogged_fraction = window > 0 ? std::min(1.0, backlogged / window) : 0;
    // Backlogged: it got clearly less GPU-time in the window than it offered (it would have had
    // with no wait at all).
    if (tally.window_gpu_seconds[name] < 0.95 * tally.offered_window_gpu_seconds[name]) {
      out.backlogged.push_back(name);
      auto policy = options.tenancies.find(name);
      const double weight = policy == options.tenancies.end() ? 1 : policy->second.weight;
      normalized.push_back(s.share / weight);
    }
    out.per_tenancy[name] = s;
  }
  for (auto& [size, waits] : tally.waits_by_size)
    out.wait_p95_s_by_size[size] = Percentile(waits, 0.95);
  out.jain_fairness = JainIndex(normalized);
}

}  // namespace

Result<QueueSimulationResult> SimulateQueue(placement::Fleet fleet, std::vector<Request> requests,
                                            const QueueSimulationOptions& options) {
  if (auto valid = ValidateSchedulerOptions(options.scheduler); !valid) return valid.error();
  if (auto checked = CheckTenantTrace(requests); !checked) return checked.error();
  std::stable_sort(requests.begin(), requests.end(),
                   [](const Request& a, const Request& b) { return a.arrival_s < b.arrival_s; });
  QueueSimulationResult out;
  out.scheduling = ModeName(options.scheduler.mode);
  std::vector<double> starts;
  auto base = RunTrace(std::move(fleet), requests, options, starts);
  if (!base) return base.error();
  out.base = std::move(*base);
  RunTally tally = TallyRun(requests, starts);
  Summarize(tally, options, out);
  return out;
}

std::string QueueSimulationToJson(const QueueSimulationResult& result, bool include_timing) {
  auto out =
      nlohmann::ordered_json::parse(placement::SimulationToJson(result.base, include_timing));
  out["scheduling"] = result.scheduling;
  auto by_size = [](const std::map<int, double>& values) {
    nlohmann::ordered_json object = nlohmann::ordered_json::object();
    for (const auto& [size, value] : values)
      object[std::to_string(size)] = Round6(value);
    return object;
  };
  nlohmann::ordered_json tenancies = nlohmann::ordered_json::object();
  for (const auto& [name, s] : result.per_tenancy) {
    tenancies[name] = {{"requests", s.requests},
                       {"admitted", s.admitted},
                       {"gpu_hours", Round6(s.gpu_hours)},
                       {"share", Round6(s.share)},
                       {"wait_p50_s", Round6(s.wait_p50_s)},
                       {"wait_p95_s", Round6(s.wait_p95_s)},
                       {"wait_max_s", Round6(s.wait_max_s)},
                       {"wait_p95_s_by_size", by_size(s.wait_p95_s_by_size)},
                       {"backlogged_fraction", Round6(s.backlogged_fraction)}};
  }
  out["per_tenancy"] = std::move(tenancies);
  out["wait_p95_s_by_size"] = by_size(result.wait_p95_s_by_size);
  out["backlogged_tenancies"] = result.backlogged;
  out["jain_fairness"] = Round6(result.jain_fairness);
  return out.dump(2);
}

}  // namespace tessera::scheduling

// Discrete-event simulation of a fleet under a request trace: arrivals in time order, departures
// from a heap; a departure at the same instant as an arrival happens first.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <nlohmann/json.hpp>
#include <queue>

#include "placement/placement.h"

namespace tessera::placement {
namespace {

struct Departure {
  double time;
  int64_t sequence;  // ties in time leave in the order they were admitted
  Placement placement;
  int gpus;
};

struct Later {
  bool operator()(const Departure& a, const Departure& b) const {
    return a.time != b.time ? a.time > b.time : a.sequence > b.sequence;
  }
};

double Round6(double value) {
  return std::round(value * 1e6) / 1e6;
}

Status CheckTrace(const std::vector<Request>& requests) {
  for (size_t i = 0; i < requests.size(); ++i) {
    const Request& r = requests[i];
    if (!(r.arrival_s >= 0) || !std::isfinite(r.arrival_s) || !(r.duration_s > 0) ||
        !std::isfinite(r.duration_s) || r.gpus < 1) {
      return InvalidArgument("request " + std::to_string(i) +
                             ": needs arrival_s >= 0, duration_s > 0 and gpus >= 1");
    }
  }
  return Ok();
}

// One simulation run over a trace sorted by arrival: the fleet, the departures to come and,
// with a queue, the requests waiting.
class TraceRun {
 public:
  TraceRun(Fleet& fleet, const std::vector<Request>& requests, const SimulationOptions& options,
           SimulationResult& result)
      : fleet_(fleet), requests_(requests), options_(options), result_(result), meter_(requests) {}

  // Request `i` arrives: what left by then leaves first, then it is placed, queued or rejected.
  void Arrive(size_t i) {
    const Request& r = requests_[i];
    result_.offered_gpu_hours += r.gpus * r.duration_s / 3600.0;
    ++result_.requests_by_size[r.gpus];
    DepartUntil(r.arrival_s);
    meter_.Advance(r.arrival_s);
    int& can = possible_[std::min(r.gpus, 64)];
    if (can < 0) can = fleet_.CanEverPlace(r.gpus).ok() ? 1 : 0;
    if (!can) {
      ++result_.never_placeable;
      ++result_.rejected;
      return;
    }
    Placement placement;
    ++result_.decisions;
    // With a queue, arrivals wait behind earlier requests of the same or smaller size only
    // through backfill; an arrival that fits now is placed now.
    if (fleet_.TryPlace(r.gpus, options_.policy, &placement)) {
      Admit(i, placement, r.arrival_s);
    } else if (options_.queue) {
      waiting_.push_back(i);
    } else {
      ++result_.rejected;
    }
  }
  // Everything left runs to its end; what still waits could never start.
  void Finish() {
    DepartUntil(INFINITY);
    result_.rejected += static_cast<int64_t>(waiting_.size());
    meter_.Finish(requests_, result_);
  }

 private:
  void Admit(size_t index, const Placement& placement, double now) {
    const Request& r = requests_[index];
    ++result_.admitted;
    ++result_.admitted_by_size[r.gpus];
    result_.served_gpu_hours += r.gpus * r.duration_s / 3600.0;
    if (options_.start_times) (*options_.start_times)[index] = now;
    meter_.Started(r.gpus, now - r.arrival_s);
    departures_.push({now + r.duration_s, sequence_++, placement, r.gpus});
  }
  void DrainQueue(double now) {
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      Placement placement;
      ++result_.decisions;
      if (fleet_.TryPlace(requests_[*it].gpus, options_.policy, &placement)) {
        Admit(*it, placement, now);
        it = waiting_.erase(it);
      } else {
        ++it;
      }
    }
  }
  // Departures at or before `time`, each followed by a try of the queue.
  void DepartUntil(double time) {
    while (!departures_.empty() && departures_.top().time <= time) {
      Departure d = departures_.top();
      departures_.pop();
      meter_.Advance(d.time);
      meter_.Ended(d.gpus);
      (void)fleet_.Release(d.placement);
      if (options_.queue && !waiting_.empty()) DrainQueue(d.time);
    }
  }

  Fleet& fleet_;
  const std::vector<Request>& requests_;
  const SimulationOptions& options_;
  SimulationResult& result_;
  SimulationMeter meter_;
  std::priority_queue<Departure, std::vector<Departure>, Later> departures_;
  std::deque<size_t> waiting_;
  int64_t sequence_ = 0;
  std::vector<int> possible_ =
      std::vector<int>(65, -1);  // per size: 1 placeable, 0 never, -1 unknown
};

}  // namespace

Result<SimulationResult> Simulate(Fleet fleet, std::vector<Request> requests,
                                  const SimulationOptions& options) {
  if (auto checked = CheckTrace(requests); !checked) return checked.error();
  std::stable_sort(requests.begin(), requests.end(),
                   [](const Request& a, const Request& b) { return a.arrival_s < b.arrival_s; });

  SimulationResult result;
  result.policy = PolicyName(options.policy);
  result.nodes = fleet.node_count();
  result.gpus = fleet.total_gpus();
  result.queue = options.queue;
  result.requests = static_cast<int64_t>(requests.size());
  if (options.start_times) options.start_times->assign(requests.size(), NAN);
  if (requests.empty()) return result;

  TraceRun run(fleet, requests, options, result);
  for (size_t i = 0; i < requests.size(); ++i)
    run.Arrive(i);
  run.Finish();
  return result;
}

std::string SimulationToJson(const SimulationResult& result, bool include_timing) {
  nlohmann::ordered_json out;
  out["policy"] = result.policy;
  out["nodes"] = result.nodes;
  out["gpus"] = result.gpus;
  out["queue"] = result.queue;
  out["requests"] = result.requests;
  out["admitted"] = result.admitted;
  out["rejected"] = result.rejected;
  out["never_placeable"] = result.never_placeable;
  auto by_size = [](const std::map<int, int64_t>& counts) {
    nlohmann::ordered_json object = nlohmann::ordered_json::object();
    for (const auto& [size, count] : counts)
      object[std::to_string(size)] = count;
    return object;
  };
  out["requests_by_size"] = by_size(result.requests_by_size);
  out["admitted_by_size"] = by_size(result.admitted_by_size);
  out["offered_gpu_hours"] = Round6(result.offered_gpu_hours);
  out["served_gpu_hours"] = Round6(result.served_gpu_hours);
  out["served_fraction"] = result.offered_gpu_hours > 0
                               ? Round6(result.served_gpu_hours / result.offered_gpu_hours)
                               : 0.0;
  out["offered_load"] = Round6(result.offered_load);
  out["gpu_utilization"] = Round6(result.gpu_utilization);
  if (result.queue) out["mean_wait_s"] = Round6(result.mean_wait_s);
  out["decisions"] = result.decisions;
  if (include_timing) {
    out["decisions_per_second"] =
        result.elapsed_s > 0 ? std::round(result.decisions / result.elapsed_s) : 0.0;
  }
  return out.dump(2);
}

}  // namespace tessera::placement

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

}  // namespace

Result<SimulationResult> Simulate(Fleet fleet, std::vector<Request> requests,
                                  const SimulationOptions& options) {
  for (size_t i = 0; i < requests.size(); ++i) {
    const Request& r = requests[i];
    if (!(r.arrival_s >= 0) || !std::isfinite(r.arrival_s) || !(r.duration_s > 0) ||
        !std::isfinite(r.duration_s) || r.gpus < 1) {
      return InvalidArgument("request " + std::to_string(i) +
                             ": needs arrival_s >= 0, duration_s > 0 and gpus >= 1");
    }
  }
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

  SimulationMeter meter(requests);

  std::priority_queue<Departure, std::vector<Departure>, Later> departures;
  std::deque<size_t> waiting;
  int64_t sequence = 0;
  std::vector<int> possible(65, -1);  // per size: 1 placeable, 0 never, -1 unknown

  auto admit = [&](size_t index, const Placement& placement, double now) {
    const Request& r = requests[index];
    ++result.admitted;
    ++result.admitted_by_size[r.gpus];
    result.served_gpu_hours += r.gpus * r.duration_s / 3600.0;
    if (options.start_times) (*options.start_times)[index] = now;
    meter.Started(r.gpus, now - r.arrival_s);
    departures.push({now + r.duration_s, sequence++, placement, r.gpus});
  };
  auto drain_queue = [&](double now) {
    for (auto it = waiting.begin(); it != waiting.end();) {
      Placement placement;
      ++result.decisions;
      if (fleet.TryPlace(requests[*it].gpus, options.policy, &placement)) {
        admit(*it, placement, now);
        it = waiting.erase(it);
      } else {
        ++it;
      }
    }
  };
  auto depart_until = [&](double time, bool inclusive) {
    while (!departures.empty() &&
           (inclusive ? departures.top().time <= time : departures.top().time < time)) {
      Departure d = departures.top();
      departures.pop();
      meter.Advance(d.time);
      meter.Ended(d.gpus);
      (void)fleet.Release(d.placement);
      if (options.queue && !waiting.empty()) drain_queue(d.time);
    }
  };

  for (size_t i = 0; i < requests.size(); ++i) {
    const Request& r = requests[i];
    result.offered_gpu_hours += r.gpus * r.duration_s / 3600.0;
    ++result.requests_by_size[r.gpus];
    depart_until(r.arrival_s, true);
    meter.Advance(r.arrival_s);
    int& can = possible[std::min(r.gpus, 64)];
    if (can < 0) can = fleet.CanEverPlace(r.gpus).ok() ? 1 : 0;
    if (!can) {
      ++result.never_placeable;
      ++result.rejected;
      continue;
    }
    Placement placement;
    ++result.decisions;
    // With a queue, arrivals wait behind earlier requests of the same or smaller size only
    // through backfill; an arrival that fits now is placed now.
    if (fleet.TryPlace(r.gpus, options.policy, &placement)) {
      admit(i, placement, r.arrival_s);
    } else if (options.queue) {
      waiting.push_back(i);
    } else {
      ++result.rejected;
    }
  }
  depart_until(INFINITY, true);
  result.rejected += static_cast<int64_t>(waiting.size());  // could never start
  meter.Finish(requests, result);
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

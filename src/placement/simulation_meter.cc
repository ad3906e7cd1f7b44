#include <algorithm>

#include "placement/placement.h"

namespace tessera::placement {

SimulationMeter::SimulationMeter(const std::vector<Request>& requests)
    : window_start_(requests.front().arrival_s),
      window_end_(requests.back().arrival_s),
      last_time_(window_start_) {}

void SimulationMeter::Advance(double time) {
  const double from = std::clamp(last_time_, window_start_, window_end_);
  const double to = std::clamp(time, window_start_, window_end_);
  busy_gpu_seconds_ += busy_ * (to - from);
  last_time_ = time;
}

void SimulationMeter::Finish(const std::vector<Request>& requests, SimulationResult& result) const {
  result.elapsed_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  const double window = window_end_ - window_start_;
  if (window > 0 && result.gpus > 0) {
    result.gpu_utilization = busy_gpu_seconds_ / (result.gpus * window);
    double offered_seconds = 0;
    for (const Request& r : requests)
      offered_seconds += r.gpus * r.duration_s;
    result.offered_load = offered_seconds / (result.gpus * window);
  }
  if (result.admitted > 0) result.mean_wait_s = total_wait_s_ / result.admitted;
}

}  // namespace tessera::placement

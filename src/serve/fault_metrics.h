// GPU faults and recoveries as /metrics shows them: tessera_gpu_faults_total{gpu,xid,action},
// tessera_gpu_recoveries_total{gpu} and the histogram tessera_gpu_recovery_seconds
// (docs/faults.md). Thread-safe (one mutex); the label sets are bounded: at most `max_gpus` GPUs
// and `max_series_per_gpu` (Xid, action) pairs per GPU are kept, and what falls outside is only
// counted in tessera_gpu_fault_series_dropped_total.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>

namespace tessera::serve {

class FaultMetrics {
 public:
  // Seconds from the fault that took a GPU out to its return to service.
  static constexpr std::array<double, 9> kRecoveryBounds = {1, 5, 15, 30, 60, 120, 300, 600, 1800};
  explicit FaultMetrics(size_t max_gpus = 1024, size_t max_series_per_gpu = 64)
      : max_gpus_(max_gpus), max_series_per_gpu_(max_series_per_gpu) {}
  FaultMetrics(const FaultMetrics&) = delete;
  FaultMetrics& operator=(const FaultMetrics&) = delete;

  // A fault's decision on `gpu` (its ID in the API): `xid` 0 for a signal that is no Xid,
  // `action` the decision's metrics label (health::Decision::action).
  void Fault(const std::string& gpu, uint64_t xid, const std::string& action);
  // `gpu` is back in service `seconds` after the fault that took it out.
  void Recovered(const std::string& gpu, double seconds);
  // The families in the Prometheus text format (version 0.0.4), HELP and TYPE included.
  void Render(std::string& out) const;

 private:
  // mu_ held: whether `gpu` has (or may now take) a place among the GPUs kept.
  bool KeepGpuLocked(const std::string& gpu);

  const size_t max_gpus_;
  const size_t max_series_per_gpu_;
  mutable std::mutex mu_;  // guards everything below
  std::set<std::string> gpus_;
  std::map<std::string, std::map<std::pair<uint64_t, std::string>, uint64_t>> faults_;  // by GPU
  std::map<std::string, uint64_t> recoveries_;                                          // by GPU
  std::array<uint64_t, kRecoveryBounds.size() + 1> recovery_buckets_{};  // the last: +Inf
  double recovery_sum_ = 0;
  uint64_t recovery_count_ = 0;
  uint64_t dropped_ = 0;
};

}  // namespace tessera::serve

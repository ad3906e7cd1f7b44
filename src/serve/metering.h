// Metering: GPU-seconds per container and per tenancy from durable records (a usage record per
// ended container, and the running ones from their stored start), and how long GPU containers
// waited in the queue. Bookkeeping only; the model's lock guards it.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "fleet/fleet.h"

namespace tessera::serve {

// GPU-milliseconds of `gpus` GPU equivalents held over [started_ms, finished_ms) that fall in
// [from_ms, to_ms).
double OverlapGpuMs(double gpus, int64_t started_ms, int64_t finished_ms, int64_t from_ms,
                    int64_t to_ms);

// The usage record of a container that ends now: none (gpus 0) when it never ran with GPUs.
// MIG slices count by their share of their GPU (fleet::GpuEquivalents). Its measured use is what
// the container record holds; `gpu_model` labels it.
fleet::UsageRecord UsageOf(const fleet::ContainerRecord& container,
                           const std::string& gpu_model = "");

// The share of a container's measured use that falls in [from_ms, to_ms): its run taken as even
// (the record holds totals); a run of no length counts whole when it is inside.
fleet::MeasuredUsage MeasuredWithin(const fleet::MeasuredUsage& measured, int64_t started_ms,
                                    int64_t finished_ms, int64_t from_ms, int64_t to_ms);

// The labels of the per-tenancy series: tenancy, GPU model, how it holds GPUs ("gpu", "mig").
using TenancySeriesKey = std::tuple<std::string, std::string, std::string>;

// Prometheus histogram of queue waits, seconds.
struct WaitHistogram {
  static constexpr std::array<double, 12> kBounds = {1,   5,    15,   30,   60,    300,
                                                     900, 1800, 3600, 7200, 21600, 86400};
  std::array<uint64_t, kBounds.size() + 1> buckets{};  // not cumulative; last: above every bound
  uint64_t count = 0;
  double sum = 0;
  void Observe(double seconds);
};

class Meter {
 public:
  // Usage records as the store holds them (by finished_ms), at start-up.
  void Load(std::vector<fleet::UsageRecord> records);
  void Add(fleet::UsageRecord record);
  // Usage records of a tenancy name (every incarnation), in the order they were added.
  const std::vector<fleet::UsageRecord>& Of(const std::string& tenancy) const;
  // GPU-milliseconds of the ended containers, per tenancy name.
  const std::map<std::string, double>& ended_gpu_ms() const { return ended_gpu_ms_; }
  // Measured use of the ended containers, per tenancy, GPU model and mode.
  const std::map<TenancySeriesKey, fleet::MeasuredUsage>& ended_measured() const {
    return ended_measured_;
  }

  void ObserveWait(const std::string& tenancy, double seconds) { waits_[tenancy].Observe(seconds); }
  const std::map<std::string, WaitHistogram>& waits() const { return waits_; }

 private:
  std::unordered_map<std::string, std::vector<fleet::UsageRecord>> records_;
  std::map<std::string, double> ended_gpu_ms_;
  std::map<TenancySeriesKey, fleet::MeasuredUsage> ended_measured_;
  std::map<std::string, WaitHistogram> waits_;
};

}  // namespace tessera::serve

// Metering: GPU-seconds per run and per tenancy incarnation from durable records (one usage
// record per ended run, the running ones from their start), and how long GPU containers waited in
// the queue. Everything is kept per incarnation (tenancy uid), never per name: a name deleted and
// created again is another owner, who starts from nothing.
//
// The meter has a lock of its own: usage reports are worked out beside the service's model, not
// under its lock, and in time that follows what they list (sorted runs with prefix sums), not how
// many runs a tenancy ever had.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "fleet/fleet.h"
#include "serve/types.h"

namespace tessera::serve {

// GPU-milliseconds of `gpus` GPU equivalents held over [started_ms, finished_ms) that fall in
// [from_ms, to_ms).
double OverlapGpuMs(double gpus, int64_t started_ms, int64_t finished_ms, int64_t from_ms,
                    int64_t to_ms);

// The usage record of a container that ended (its finished_ms set): none (gpus 0) when it never
// ran with GPUs. MIG slices count by their share of their GPU (fleet::GpuEquivalents). Its
// measured use is what the container record holds; `gpu_model` labels it.
fleet::UsageRecord UsageOf(const fleet::ContainerRecord& container,
                           const std::string& gpu_model = "");

// The share of a run's measured use that falls in [from_ms, to_ms): the run taken as even (the
// record holds totals); a run of no length counts whole when it is inside.
fleet::MeasuredUsage MeasuredWithin(const fleet::MeasuredUsage& measured, int64_t started_ms,
                                    int64_t finished_ms, int64_t from_ms, int64_t to_ms);

// The labels of the per-tenancy series: tenancy, GPU model, how it holds GPUs ("gpu", "mig",
// "share").
using TenancySeriesKey = std::tuple<std::string, std::string, std::string>;
inline constexpr char kShareSeriesMode[] = "share";
// How a container holds GPUs, as its usage record and the per-tenancy series' `mode` say it.
std::string TenancySeriesMode(const fleet::ContainerRecord& container);

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
  // Usage records as the store holds them, at start-up.
  void Load(std::vector<fleet::UsageRecord> records);
  // A run ended: its record. False (and nothing counted) when that run is counted already.
  bool Add(const fleet::UsageRecord& record);
  // A container of incarnation `uid` (tenancy `name`) runs with `gpus` GPU equivalents since
  // `started_ms`; it counts until Add or Stopped.
  // `measured`: what telemetry measured of it so far (its record's), if anything.
  void Started(const std::string& uid, const std::string& name, const std::string& container_id,
               double gpus, int64_t started_ms,
               std::optional<fleet::MeasuredUsage> measured = std::nullopt);
  // Telemetry measured more of a running container: its total so far.
  void Measured(const std::string& uid, const std::string& container_id,
                const fleet::MeasuredUsage& measured);
  // It ended with nothing to meter (it never ran).
  void Stopped(const std::string& uid, const std::string& container_id);
  void ObserveWait(const std::string& uid, const std::string& name, double seconds);

  // GPU-milliseconds of `uid`: its ended runs, and its running ones up to `now_ms`.
  double TotalGpuMs(const std::string& uid, int64_t now_ms) const;
  std::optional<WaitHistogram> WaitsOf(const std::string& uid) const;
  // Every incarnation that metered anything under `name` (the admin's history of a name).
  std::vector<std::string> IncarnationsOf(const std::string& name) const;
  // GPU-seconds of `uids` in [from_ms, to_ms), running ones up to `now_ms`, and what those runs
  // were measured to use (each run's figures taken as even over it); with `step_ms`, the same per
  // bucket of that length from `from_ms` on (report.series).
  UsageReport Report(const std::vector<std::string>& uids, int64_t from_ms, int64_t to_ms,
                     int64_t now_ms, int64_t step_ms = 0) const;
  // What the ended runs of the incarnations in `names` (uid -> tenancy name) were measured to
  // use, per tenancy name, GPU model and mode: the per-tenancy counters of /metrics.
  std::map<TenancySeriesKey, fleet::MeasuredUsage> EndedMeasured(
      const std::map<std::string, std::string>& names) const;

 private:
  struct Incarnation {
    std::string name;
    std::vector<fleet::UsageRecord> ended;  // by finished_ms
    std::vector<double> prefix_gpu_ms;      // [i]: GPU-ms of ended[0..i); ended.size() + 1
    // [i]: the measured use of ended[0..i), and how many of them were measured.
    std::vector<fleet::MeasuredUsage> prefix_measured;
    std::vector<size_t> prefix_measured_runs;
    int64_t longest_ms = 0;  // the longest ended run
    // The ended runs' measured use by GPU model and mode.
    std::map<std::pair<std::string, std::string>, fleet::MeasuredUsage> ended_measured;
    struct Running {
      double gpus = 0;
      int64_t started_ms = 0;
      std::optional<fleet::MeasuredUsage> measured;  // so far; unset: not measured
    };
    std::map<std::string, Running> running;  // by container ID
    WaitHistogram waits;
  };
  Incarnation& IncarnationLocked(const std::string& uid, const std::string& name);
  bool AddLocked(const fleet::UsageRecord& record);
  void ReportLocked(const Incarnation& incarnation, int64_t from_ms, int64_t to_ms, int64_t now_ms,
                    int64_t step_ms, UsageReport& report) const;
  // ReportLocked's steps. Where a window [from, to) falls in the ended runs: [i0, i1) ended
  // inside it, [i0, straddle_from) may have started before `from`, [i1, straddle_to) ended at or
  // after `to` and may have started before it.
  struct EndedWindow {
    size_t i0 = 0, i1 = 0, straddle_from = 0, straddle_to = 0;
  };
  static EndedWindow EndedWindowOf(const std::vector<fleet::UsageRecord>& ended, int64_t longest,
                                   int64_t from_ms, int64_t to_ms);
  // The running containers' part; returns how many were in the window.
  size_t ReportRunningLocked(const Incarnation& incarnation, int64_t from_ms, int64_t to_ms,
                             int64_t now_ms, int64_t step_ms, UsageReport& report) const;
  // The ended runs' GPU time and measured use within the window (`window`: where it falls in
  // incarnation.ended); returns how many ended at or after `to_ms` and started before it.
  size_t AddEndedUsageLocked(const Incarnation& incarnation, const EndedWindow& window,
                             int64_t from_ms, int64_t to_ms, UsageReport& report) const;

  mutable std::mutex mu_;  // guards everything below
  std::unordered_map<std::string, Incarnation> by_uid_;
  std::map<std::string, std::vector<std::string>> uids_by_name_;
  std::unordered_set<uint64_t> runs_;  // hashes of (container, start) counted
};

}  // namespace tessera::serve

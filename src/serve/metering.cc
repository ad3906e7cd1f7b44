#include "serve/metering.h"

#include <algorithm>
#include <functional>

namespace tessera::serve {

double OverlapGpuMs(double gpus, int64_t started_ms, int64_t finished_ms, int64_t from_ms,
                    int64_t to_ms) {
  const int64_t begin = std::max(started_ms, from_ms);
  const int64_t end = std::min(finished_ms, to_ms);
  return end > begin ? gpus * static_cast<double>(end - begin) : 0;
}

fleet::UsageRecord UsageOf(const fleet::ContainerRecord& container, const std::string& gpu_model) {
  fleet::UsageRecord record;
  if (container.started_ms <= 0 || container.gpus.empty()) return record;
  record.container_id = container.id;
  record.tenancy = container.spec.tenancy;
  record.tenancy_uid = container.tenancy_uid;
  record.gpus = fleet::GpuEquivalents(container);
  record.started_ms = container.started_ms;
  record.finished_ms = std::max(container.finished_ms, container.started_ms);
  record.measured = container.measured;
  record.gpu_model = gpu_model;
  record.mode = TenancySeriesMode(container);
  return record;
}

std::string TenancySeriesMode(const fleet::ContainerRecord& container) {
  // "share" as the telemetry's running series label shares (serve/measurement.cc), so a run's
  // series keeps its labels when it ends.
  if (container.spec.share) return kShareSeriesMode;
  return container.spec.mig.count > 0 ? "mig" : "gpu";
}

fleet::MeasuredUsage MeasuredWithin(const fleet::MeasuredUsage& measured, int64_t started_ms,
                                    int64_t finished_ms, int64_t from_ms, int64_t to_ms) {
  if (finished_ms <= started_ms) {
    return started_ms >= from_ms && started_ms < to_ms ? measured : fleet::MeasuredUsage{};
  }
  const double share = OverlapGpuMs(1.0, started_ms, finished_ms, from_ms, to_ms) /
                       static_cast<double>(finished_ms - started_ms);
  return {measured.sm_seconds * share, measured.memory_gib_seconds * share,
          measured.energy_joules * share};
}

void WaitHistogram::Observe(double seconds) {
  size_t i = 0;
  while (i < kBounds.size() && seconds > kBounds[i])
    ++i;
  buckets[i]++;
  count++;
  sum += seconds;
}

namespace {

uint64_t RunKey(const std::string& container_id, int64_t started_ms) {
  return std::hash<std::string>{}(container_id)*1000003u ^ std::hash<int64_t>{}(started_ms);
}

double GpuMs(const fleet::UsageRecord& record) {
  return record.gpus * static_cast<double>(record.finished_ms - record.started_ms);
}

fleet::MeasuredUsage Minus(const fleet::MeasuredUsage& a, const fleet::MeasuredUsage& b) {
  return {a.sm_seconds - b.sm_seconds, a.memory_gib_seconds - b.memory_gib_seconds,
          a.energy_joules - b.energy_joules};
}

void AddMeasured(std::optional<fleet::MeasuredUsage>& total, const fleet::MeasuredUsage& more) {
  if (!total) total = fleet::MeasuredUsage{};
  *total += more;
}

// Adds a run's GPU time and measured use over [started_ms, finished_ms) to each bucket it
// overlaps (a run of no length to none: it held nothing for any time).
void AddToSeries(UsageReport& report, int64_t step_ms, double gpus, int64_t started_ms,
                 int64_t finished_ms, const std::optional<fleet::MeasuredUsage>& measured) {
  if (step_ms <= 0 || report.series.empty() || finished_ms <= started_ms) return;
  const int64_t first = (std::max(started_ms, report.from_ms) - report.from_ms) / step_ms;
  const int64_t last = (std::min(finished_ms, report.to_ms) - 1 - report.from_ms) / step_ms;
  for (int64_t i = std::max<int64_t>(first, 0);
       i <= last && i < static_cast<int64_t>(report.series.size()); ++i) {
    auto& bucket = report.series[static_cast<size_t>(i)];
    const int64_t bucket_end = std::min(bucket.start_ms + step_ms, report.to_ms);
    bucket.gpu_seconds +=
        OverlapGpuMs(gpus, started_ms, finished_ms, bucket.start_ms, bucket_end) / 1000.0;
    if (measured)
      bucket.measured +=
          MeasuredWithin(*measured, started_ms, finished_ms, bucket.start_ms, bucket_end);
  }
}

// A run's measured use within the window (its figures taken as even over the run).
std::optional<fleet::MeasuredUsage> MeasuredInWindow(
    const std::optional<fleet::MeasuredUsage>& measured, int64_t started_ms, int64_t finished_ms,
    int64_t from_ms, int64_t to_ms) {
  if (!measured) return std::nullopt;
  return MeasuredWithin(*measured, started_ms, finished_ms, from_ms, to_ms);
}

// The first of the ended runs (by finished_ms) that finished at or after `ms`.
size_t FirstFinishedAtOrAfter(const std::vector<fleet::UsageRecord>& ended, int64_t ms) {
  return static_cast<size_t>(
      std::lower_bound(ended.begin(), ended.end(), ms,
                       [](const fleet::UsageRecord& r, int64_t t) { return r.finished_ms < t; }) -
      ended.begin());
}

}  // namespace

Meter::Incarnation& Meter::IncarnationLocked(const std::string& uid, const std::string& name) {
  auto [it, inserted] = by_uid_.try_emplace(uid);
  if (inserted) {
    it->second.name = name;
    it->second.prefix_gpu_ms.push_back(0);
    it->second.prefix_measured.emplace_back();
    it->second.prefix_measured_runs.push_back(0);
    uids_by_name_[name].push_back(uid);
  }
  return it->second;
}

void Meter::Load(std::vector<fleet::UsageRecord> records) {
  std::lock_guard lock(mu_);
  for (const auto& record : records)
    AddLocked(record);
}

bool Meter::Add(const fleet::UsageRecord& record) {
  std::lock_guard lock(mu_);
  return AddLocked(record);
}

bool Meter::AddLocked(const fleet::UsageRecord& record) {
  if (!runs_.insert(RunKey(record.container_id, record.started_ms)).second) return false;
  Incarnation& incarnation = IncarnationLocked(record.tenancy_uid, record.tenancy);
  incarnation.running.erase(record.container_id);
  auto& ended = incarnation.ended;
  // Runs end in about the order they are learnt of; one the runtime says ended earlier (an exit
  // while the service was down) goes into its place.
  auto at = std::upper_bound(ended.begin(), ended.end(), record.finished_ms,
                             [](int64_t finished, const fleet::UsageRecord& other) {
                               return finished < other.finished_ms;
                             });
  const size_t index = static_cast<size_t>(at - ended.begin());
  ended.insert(at, record);
  auto& prefix = incarnation.prefix_gpu_ms;
  auto& measured = incarnation.prefix_measured;
  auto& measured_runs = incarnation.prefix_measured_runs;
  prefix.resize(ended.size() + 1);
  measured.resize(ended.size() + 1);
  measured_runs.resize(ended.size() + 1);
  for (size_t i = index; i < ended.size(); ++i) {
    prefix[i + 1] = prefix[i] + GpuMs(ended[i]);
    measured[i + 1] = measured[i];
    if (ended[i].measured) measured[i + 1] += *ended[i].measured;
    measured_runs[i + 1] = measured_runs[i] + (ended[i].measured ? 1 : 0);
  }
  incarnation.longest_ms = std::max(incarnation.longest_ms, record.finished_ms - record.started_ms);
  if (record.measured)
    incarnation.ended_measured[{record.gpu_model, record.mode}] += *record.measured;
  return true;
}

void Meter::Started(const std::string& uid, const std::string& name,
                    const std::string& container_id, double gpus, int64_t started_ms,
                    std::optional<fleet::MeasuredUsage> measured) {
  std::lock_guard lock(mu_);
  IncarnationLocked(uid, name).running[container_id] = {gpus, started_ms, measured};
}

void Meter::Measured(const std::string& uid, const std::string& container_id,
                     const fleet::MeasuredUsage& measured) {
  std::lock_guard lock(mu_);
  auto it = by_uid_.find(uid);
  if (it == by_uid_.end()) return;
  if (auto run = it->second.running.find(container_id); run != it->second.running.end())
    run->second.measured = measured;
}

void Meter::Stopped(const std::string& uid, const std::string& container_id) {
  std::lock_guard lock(mu_);
  if (auto it = by_uid_.find(uid); it != by_uid_.end()) it->second.running.erase(container_id);
}

void Meter::ObserveWait(const std::string& uid, const std::string& name, double seconds) {
  std::lock_guard lock(mu_);
  IncarnationLocked(uid, name).waits.Observe(seconds);
}

double Meter::TotalGpuMs(const std::string& uid, int64_t now_ms) const {
  std::lock_guard lock(mu_);
  auto it = by_uid_.find(uid);
  if (it == by_uid_.end()) return 0;
  double total = it->second.prefix_gpu_ms.back();
  for (const auto& [id, run] : it->second.running)
    total += OverlapGpuMs(run.gpus, run.started_ms, now_ms, run.started_ms, now_ms);
  return total;
}

std::optional<WaitHistogram> Meter::WaitsOf(const std::string& uid) const {
  std::lock_guard lock(mu_);
  auto it = by_uid_.find(uid);
  if (it == by_uid_.end() || it->second.waits.count == 0) return std::nullopt;
  return it->second.waits;
}

std::vector<std::string> Meter::IncarnationsOf(const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = uids_by_name_.find(name);
  return it == uids_by_name_.end() ? std::vector<std::string>() : it->second;
}

std::map<TenancySeriesKey, fleet::MeasuredUsage> Meter::EndedMeasured(
    const std::map<std::string, std::string>& names) const {
  std::map<TenancySeriesKey, fleet::MeasuredUsage> out;
  std::lock_guard lock(mu_);
  for (const auto& [uid, name] : names) {
    auto it = by_uid_.find(uid);
    if (it == by_uid_.end()) continue;
    for (const auto& [labels, measured] : it->second.ended_measured)
      out[{name, labels.first, labels.second}] += measured;
  }
  return out;
}

UsageReport Meter::Report(const std::vector<std::string>& uids, int64_t from_ms, int64_t to_ms,
                          int64_t now_ms, int64_t step_ms) const {
  UsageReport report;
  report.from_ms = from_ms;
  report.to_ms = to_ms;
  if (step_ms > 0) {
    for (int64_t start = from_ms; start < to_ms; start += step_ms)
      report.series.push_back({start, 0, {}});
  }
  std::lock_guard lock(mu_);
  for (const auto& uid : uids)
    if (auto it = by_uid_.find(uid); it != by_uid_.end())
      ReportLocked(it->second, from_ms, to_ms, now_ms, step_ms, report);
  // Running ones first, then the latest ended; at most kMaxContainers of them.
  std::stable_sort(report.containers.begin(), report.containers.end(),
                   [](const ContainerUsage& a, const ContainerUsage& b) {
                     if ((a.finished_ms == 0) != (b.finished_ms == 0)) return a.finished_ms == 0;
                     return a.finished_ms > b.finished_ms;
                   });
  if (report.containers.size() > UsageReport::kMaxContainers)
    report.containers.resize(UsageReport::kMaxContainers);
  return report;
}

void Meter::ReportLocked(const Incarnation& incarnation, int64_t from_ms, int64_t to_ms,
                         int64_t now_ms, int64_t step_ms, UsageReport& report) const {
  size_t listed = ReportRunningLocked(incarnation, from_ms, to_ms, now_ms, step_ms, report);
  const auto& ended = incarnation.ended;
  const EndedWindow w = EndedWindowOf(ended, incarnation.longest_ms, from_ms, to_ms);
  const size_t after = AddEndedUsageLocked(incarnation, w, from_ms, to_ms, report);
  // The series: every run in the window, bucket by bucket.
  if (step_ms > 0) {
    for (size_t i = w.i0; i < w.straddle_to; ++i) {
      const auto& r = ended[i];
      if (r.started_ms < to_ms)
        AddToSeries(report, step_ms, r.gpus, r.started_ms, r.finished_ms, r.measured);
    }
  }
  report.containers_total += (w.i1 - w.i0) + after;
  // The latest ended first, as far as the listing goes.
  for (size_t i = w.straddle_to; i-- > w.i0 && listed < UsageReport::kMaxContainers;) {
    const auto& r = ended[i];
    if (r.started_ms >= to_ms) continue;
    ++listed;
    report.containers.push_back(
        {r.container_id, r.gpus, r.started_ms, r.finished_ms,
         OverlapGpuMs(r.gpus, r.started_ms, r.finished_ms, from_ms, to_ms) / 1000.0,
         MeasuredInWindow(r.measured, r.started_ms, r.finished_ms, from_ms, to_ms)});
  }
}

Meter::EndedWindow Meter::EndedWindowOf(const std::vector<fleet::UsageRecord>& ended,
                                        int64_t longest, int64_t from_ms, int64_t to_ms) {
  // No run lasted longer than longest_ms: one that ended at or after `t + longest_ms` started at
  // or after `t`. That bounds the runs that straddle `from` or `to` to two short ranges.
  EndedWindow w;
  w.i0 = FirstFinishedAtOrAfter(ended, from_ms);                // ended inside or after the window
  w.i1 = std::max(w.i0, FirstFinishedAtOrAfter(ended, to_ms));  // ... at or after `to`
  w.straddle_from = std::min(
      w.i1,
      FirstFinishedAtOrAfter(ended, from_ms > INT64_MAX - longest ? INT64_MAX : from_ms + longest));
  w.straddle_to = std::max(
      w.i1,
      FirstFinishedAtOrAfter(ended, to_ms > INT64_MAX - longest ? INT64_MAX : to_ms + longest));
  return w;
}

size_t Meter::ReportRunningLocked(const Incarnation& incarnation, int64_t from_ms, int64_t to_ms,
                                  int64_t now_ms, int64_t step_ms, UsageReport& report) const {
  size_t listed = 0;
  // Every container that held GPUs in the window is listed, a zero-length one included.
  for (const auto& [id, run] : incarnation.running) {
    if (run.started_ms >= to_ms || now_ms < from_ms) continue;
    const double gpu_ms = OverlapGpuMs(run.gpus, run.started_ms, now_ms, from_ms, to_ms);
    report.gpu_seconds += gpu_ms / 1000.0;
    const auto measured = MeasuredInWindow(run.measured, run.started_ms, now_ms, from_ms, to_ms);
    if (measured) AddMeasured(report.measured, *measured);
    AddToSeries(report, step_ms, run.gpus, run.started_ms, now_ms, run.measured);
    report.containers_total++;
    if (listed++ < UsageReport::kMaxContainers)
      report.containers.push_back({id, run.gpus, run.started_ms, 0, gpu_ms / 1000.0, measured});
  }
  return listed;
}

size_t Meter::AddEndedUsageLocked(const Incarnation& incarnation, const EndedWindow& w,
                                  int64_t from_ms, int64_t to_ms, UsageReport& report) const {
  const auto& ended = incarnation.ended;
  const auto& prefix = incarnation.prefix_gpu_ms;
  // Runs that ended in [from, to): whole, less what ran before `from`; measured use the same way.
  double gpu_ms = prefix[w.i1] - prefix[w.i0];
  const auto& measured_runs = incarnation.prefix_measured_runs;
  std::optional<fleet::MeasuredUsage> measured;
  if (measured_runs[w.i1] > measured_runs[w.i0])
    measured = Minus(incarnation.prefix_measured[w.i1], incarnation.prefix_measured[w.i0]);
  for (size_t i = w.i0; i < w.straddle_from; ++i) {
    const auto& r = ended[i];
    if (r.started_ms >= from_ms) continue;
    gpu_ms -= r.gpus * static_cast<double>(from_ms - r.started_ms);
    if (r.measured)
      *measured = Minus(*measured, MeasuredWithin(*r.measured, r.started_ms, r.finished_ms,
                                                  r.started_ms, from_ms));
  }
  // Runs that ended at or after `to` and started before it.
  size_t after = 0;
  for (size_t i = w.i1; i < w.straddle_to; ++i) {
    const auto& r = ended[i];
    if (r.started_ms >= to_ms) continue;
    gpu_ms += OverlapGpuMs(r.gpus, r.started_ms, r.finished_ms, from_ms, to_ms);
    if (auto part = MeasuredInWindow(r.measured, r.started_ms, r.finished_ms, from_ms, to_ms))
      AddMeasured(measured, *part);
    ++after;
  }
  report.gpu_seconds += gpu_ms / 1000.0;
  if (measured) AddMeasured(report.measured, *measured);
  return after;
}

}  // namespace tessera::serve

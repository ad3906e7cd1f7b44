// One collection pass: NVML's readings, the cgroups of the PIDs they name, attribution and
// integration. The cgroup of a PID is read when the PID first shows up: a process that stays in
// NVML's lists from one pass to the next is the same process, in the same container (a process
// cannot leave its container's subtree, and the outermost container decides).
#include <time.h>

#include <unordered_set>

#include "telemetry/telemetry.h"

namespace tessera::telemetry {
namespace {

double Seconds(clockid_t clock) {
  timespec ts{};
  ::clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

}  // namespace

Collector::Collector(std::unique_ptr<GpuSource> source, CollectorOptions options)
    : source_(std::move(source)), options_(std::move(options)) {}

PassResult Collector::Collect(const Directory& directory, Cursors& cursors, int64_t now_ms) {
  const double cpu_start = Seconds(CLOCK_THREAD_CPUTIME_ID);
  const double wall_start = Seconds(CLOCK_MONOTONIC);
  cost_ = PassCost{};
  std::vector<GpuReading> readings = source_->Read(cursors);
  for (auto& reading : readings) {
    cost_.nvml_seconds += reading.nvml_seconds;
    // An accounting record of a process the previous pass saw is not a short process: its
    // samples were counted while it ran.
    std::erase_if(reading.ended,
                  [this](const nvml::AccountingStats& ended) { return pids_.count(ended.pid) > 0; });
  }

  // The PIDs of this pass; those of the previous pass keep their container.
  PidContainers current;
  auto resolve = [&](uint32_t pid) {
    if (current.count(pid)) return;
    if (auto known = pids_.find(pid); known != pids_.end()) {
      current.emplace(pid, std::move(known->second));
      return;
    }
    ++cost_.cgroup_reads;
    auto text = ReadProcCgroup(options_.proc_dir, pid);
    current.emplace(pid, text ? ContainerOfProcCgroup(*text) : std::nullopt);
  };
  for (const auto& reading : readings) {
    for (const auto& process : reading.processes)
      resolve(process.pid);
    for (const auto& sample : reading.samples)
      resolve(sample.pid);
    for (const auto& ended : reading.ended)
      resolve(ended.pid);
  }
  pids_ = std::move(current);

  PassResult result = Integrate(readings, pids_, directory, cursors, now_ms, options_.integration);
  cost_.cpu_seconds = Seconds(CLOCK_THREAD_CPUTIME_ID) - cpu_start;
  cost_.wall_seconds = Seconds(CLOCK_MONOTONIC) - wall_start;
  return result;
}

}  // namespace tessera::telemetry

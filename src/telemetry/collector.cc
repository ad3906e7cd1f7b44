// One collection pass: NVML's readings, the start time and cgroup of each PID they name,
// attribution and integration. A process is attributed only while it is alive: its start time
// (/proc/<pid>/stat) is read every pass, and a PID whose start time is the one the previous pass
// saw is the same process, in the same container (a process cannot leave its container's
// subtree, and the outermost container decides); a new start time is a reused PID, whose cgroup
// is read again. A PID that is gone is nobody's: its /proc entry may already name another
// process.
#include <time.h>
#include <unistd.h>

#include "telemetry/telemetry.h"

namespace tessera::telemetry {
namespace {

double Seconds(clockid_t clock) {
  timespec ts{};
  ::clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// Wall time of boot, ms: what `starttime` (ticks after boot, CLOCK_BOOTTIME) is counted from.
int64_t BootWallMs() {
  return static_cast<int64_t>((Seconds(CLOCK_REALTIME) - Seconds(CLOCK_BOOTTIME)) * 1000.0);
}

std::optional<uint64_t> StartTicks(const std::string& proc_dir, uint32_t pid) {
  auto text = ReadProcStat(proc_dir, pid);
  if (!text) return std::nullopt;
  return StartTicksOfProcStat(*text);
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
    std::erase_if(reading.ended, [this](const nvml::AccountingStats& ended) {
      return pids_.count(ended.pid) > 0;
    });
  }

  const int64_t boot_ms = BootWallMs();
  const long ticks_per_second = std::max(1L, ::sysconf(_SC_CLK_TCK));
  PidContainers current;
  std::unordered_map<uint32_t, uint64_t> start_ticks;
  auto resolve = [&](uint32_t pid) {
    if (current.count(pid)) return;
    PidInfo& info = current[pid];
    ++cost_.stat_reads;
    const auto ticks = StartTicks(options_.proc_dir, pid);
    if (!ticks) return;  // gone: nobody's
    auto known = pids_.find(pid);
    auto known_ticks = start_ticks_.find(pid);
    if (known != pids_.end() && known_ticks != start_ticks_.end() &&
        known_ticks->second == *ticks && known->second.start_ms >= 0) {
      info = known->second;
    } else {
      ++cost_.cgroup_reads;
      auto text = ReadProcCgroup(options_.proc_dir, pid);
      // The PID may have ended and been reused between the two reads: the cgroup counts only
      // when the start time after it is the one before it.
      ++cost_.stat_reads;
      if (!text || StartTicks(options_.proc_dir, pid) != ticks) return;
      info.container = ContainerOfProcCgroup(*text);
      info.start_ms =
          boot_ms + static_cast<int64_t>(*ticks * 1000 / static_cast<uint64_t>(ticks_per_second));
    }
    start_ticks[pid] = *ticks;
  };
  // Accounting records of ended processes are nobody's: their PIDs are not looked up.
  for (const auto& reading : readings) {
    for (const auto& process : reading.processes)
      resolve(process.pid);
    for (const auto& sample : reading.samples)
      resolve(sample.pid);
  }
  pids_ = std::move(current);
  start_ticks_ = std::move(start_ticks);

  PassResult result = Integrate(readings, pids_, directory, cursors, now_ms, options_.integration);
  cost_.cpu_seconds = Seconds(CLOCK_THREAD_CPUTIME_ID) - cpu_start;
  cost_.wall_seconds = Seconds(CLOCK_MONOTONIC) - wall_start;
  return result;
}

}  // namespace tessera::telemetry

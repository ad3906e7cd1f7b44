// Scheduling decisions per second with a deep queue: 100 HGX nodes x 8 GPUs, most GPUs held by
// running requests with known ends, 10,000 requests pending over 10 tenancies (sizes 1/2/4/8
// weighted 45/25/15/15, priorities 0..3). One decision is one pending request considered in a
// pass: admitted, given a reservation, or given its position and reason. Each pass starts from
// the same copied state; only the pass itself is timed.
// Single-threaded; pin it to one core with `taskset -c 0` for stable figures. Both wall time and
// this thread's CPU time are reported: on a shared, oversubscribed machine the wall figure
// includes time the thread waited for a core.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "scheduling/scheduling.h"
#include "support/figures.h"

using namespace tessera;
using Clock = std::chrono::steady_clock;

namespace {

using bench::ThreadCpuSeconds;

bench::SeededSequence sequence;
uint64_t Next() {
  return sequence.Next();
}

int Size() {
  const uint64_t pick = Next() % 100;
  return pick < 45 ? 1 : pick < 70 ? 2 : pick < 85 ? 4 : 8;
}

struct World {
  placement::Fleet fleet;
  scheduling::Scheduler scheduler;
};

World Build(scheduling::Mode mode, int pending, double busy_fraction) {
  auto planner = topology::PartitionPlanner::Create(topology::HgxH100Table());
  auto fleet = placement::Fleet::Uniform(100, 8, *planner);
  scheduling::SchedulerOptions options;
  options.mode = mode;
  auto scheduler = scheduling::Scheduler::Create(options);
  if (!planner || !fleet || !scheduler) std::abort();
  World world{std::move(*fleet), std::move(*scheduler)};
  for (int t = 0; t < 10; ++t) {
    if (!world.scheduler.SetTenancy("t" + std::to_string(t),
                                    {.weight = 1.0 + t % 3, .max_priority = 3})) {
      std::abort();
    }
  }
  // Running work up to the busy fraction, placed by the fleet's own policy.
  scheduling::RequestId id = 1;
  const int target = static_cast<int>(busy_fraction * world.fleet.total_gpus());
  int busy = 0, misses = 0;
  while (busy < target && misses < 1000) {
    const int gpus = Size();
    placement::Placement placement;
    if (!world.fleet.TryPlace(gpus, placement::Policy::kBinpack, &placement)) {
      ++misses;
      continue;
    }
    busy += gpus;
    world.scheduler.Started(id++, "t" + std::to_string(Next() % 10), placement, gpus, 0,
                            600 + static_cast<double>(Next() % 7200), 0, Next() % 4 == 0);
  }
  for (int i = 0; i < pending; ++i) {
    scheduling::PendingRequest r;
    r.id = id++;
    r.tenancy = "t" + std::to_string(Next() % 10);
    r.gpus = Size();
    r.priority = static_cast<int>(Next() % 4);
    r.submitted_s = i * 0.01;
    if (Next() % 2) r.max_duration_s = 60 + static_cast<double>(Next() % 3600);
    if (!world.scheduler.Enqueue(std::move(r))) std::abort();
  }
  return world;
}

void Measure(const char* name, scheduling::Mode mode, double busy_fraction, bool report,
             bool describe, int passes, int pending = 10000) {
  const World base = Build(mode, pending, busy_fraction);
  double seconds = 0, cpu_seconds = 0;
  int64_t decisions = 0, admitted = 0, reservations = 0;
  size_t text_bytes = 0;
  for (int i = 0; i < passes; ++i) {
    World world = base;
    const auto started = Clock::now();
    const double cpu_started = ThreadCpuSeconds();
    scheduling::PassResult pass = world.scheduler.Schedule(world.fleet, 1000, report);
    if (describe) {
      for (const scheduling::Wait& wait : pass.waiting)
        text_bytes += world.scheduler.Describe(wait, pass, world.fleet).size();
    }
    seconds += std::chrono::duration<double>(Clock::now() - started).count();
    cpu_seconds += ThreadCpuSeconds() - cpu_started;
    decisions += pass.decisions;
    admitted += static_cast<int64_t>(pass.admitted.size());
    reservations += static_cast<int64_t>(pass.reservations.size());
  }
  std::printf(
      "  %-44s %9.0f decisions/s wall %9.0f /s CPU  %7.2f ms/pass wall  (%lld decisions, %lld "
      "admitted, %lld reserved per pass%s)\n",
      name, decisions / seconds, decisions / cpu_seconds, 1000 * seconds / passes,
      static_cast<long long>(decisions / passes), static_cast<long long>(admitted / passes),
      static_cast<long long>(reservations / passes), describe ? ", reasons as text" : "");
  if (text_bytes == 1) std::printf("%zu\n", text_bytes);  // keeps the text from being elided
}

// What a queue report costs `tessera serve` under its model's lock: copying the queue (the walk
// itself runs on the copy, without the lock).
void MeasureCopy(int pending, int copies) {
  const World base = Build(scheduling::Mode::kFair, pending, 0.95);
  double seconds = 0;
  size_t kept = 0;
  for (int i = 0; i < copies; ++i) {
    const auto started = Clock::now();
    scheduling::Scheduler copy = base.scheduler;
    placement::Fleet fleet = base.fleet;
    seconds += std::chrono::duration<double>(Clock::now() - started).count();
    kept += copy.pending_count() + static_cast<size_t>(fleet.node_count());
  }
  std::printf("  %-44s %7.2f ms per copy (%d pending)\n", "copy of the queue and fleet (report)",
              1000 * seconds / copies, pending);
  if (kept == 1) std::printf("%zu\n", kept);
}

}  // namespace

int main(int argc, char** argv) {
  const int passes = argc > 1 ? std::atoi(argv[1]) : 50;
  std::printf("== Scheduling passes over 10,000 pending requests (100 nodes x 8 GPUs, HGX)\n");
  Measure("fair, fleet 95 % busy, full report", scheduling::Mode::kFair, 0.95, true, false, passes);
  Measure("fair, fleet 95 % busy, full report + text", scheduling::Mode::kFair, 0.95, true, true,
          passes);
  Measure("fair, fleet 70 % busy, full report", scheduling::Mode::kFair, 0.70, true, false, passes);
  Measure("fair, fleet 100 % busy, full report", scheduling::Mode::kFair, 1.0, true, false, passes);
  Measure("fifo, fleet 95 % busy, full report", scheduling::Mode::kFifo, 0.95, true, false, passes);
  // What serve runs on every change: a pass without report, which stops once nothing more can
  // start and no reservation can change.
  std::printf("== Passes without report (what serve runs), 10,000 and 100,000 pending\n");
  Measure("fair, fleet 95 % busy, no report", scheduling::Mode::kFair, 0.95, false, false, passes);
  Measure("fair, fleet 100 % busy, no report", scheduling::Mode::kFair, 1.0, false, false, passes);
  Measure("fair, 100 % busy, no report, 100k pending", scheduling::Mode::kFair, 1.0, false, false,
          std::max(1, passes / 5), 100000);
  Measure("fair, 100 % busy, full report, 100k pending", scheduling::Mode::kFair, 1.0, true, true,
          std::max(1, passes / 10), 100000);
  MeasureCopy(10000, 10);
  MeasureCopy(100000, 5);
  return 0;
}

// MIG shaped by demand against the best static layout chosen in hindsight, on a fleet of 100
// nodes x 8 H100 (800 GPUs), replaying a trace of whole-GPU, MIG and share requests
// (docs/mig-trace-bench.md). Prints GPU-hours delivered, p50/p95 wait, reconfigurations per hour
// and the planner's decision time (steady_clock around each MIG decision only).
//
//   bench_mig_fleet [--trace FILE] [--seed N] [--hours H] [--load L] [--drift D]
//                   [--nodes N] [--search-budget N] [--no-search]
//   bench_mig_fleet --generate [--seed N] [--hours H] [--load L] [--drift D]   (trace to stdout)
// Single-threaded; pin it to one core (`taskset -c 0`) for steadier decision times.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/bounded_file.h"
#include "placement/mig_fleet.h"

using namespace tessera;
using namespace tessera::placement;

namespace {

struct Args {
  std::string trace_path;
  MigTraceOptions generator;
  int nodes = 100;
  bool generate = false;
  bool search = true;
  int search_budget = 400;
};

[[noreturn]] void Usage() {
  std::fprintf(stderr,
               "usage: bench_mig_fleet [--trace FILE] [--seed N] [--hours H] [--load L] "
               "[--drift D] [--nodes N] [--search-budget N] [--no-search] [--generate]\n");
  std::exit(2);
}

Args ParseArgs(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) Usage();
      return argv[++i];
    };
    if (flag == "--trace") {
      args.trace_path = value();
    } else if (flag == "--seed") {
      args.generator.seed = std::strtoull(value(), nullptr, 10);
    } else if (flag == "--hours") {
      args.generator.hours = std::atof(value());
    } else if (flag == "--load") {
      args.generator.load = std::atof(value());
    } else if (flag == "--drift") {
      args.generator.drift = std::atof(value());
    } else if (flag == "--nodes") {
      args.nodes = std::atoi(value());
    } else if (flag == "--search-budget") {
      args.search_budget = std::atoi(value());
    } else if (flag == "--no-search") {
      args.search = false;
    } else if (flag == "--generate") {
      args.generate = true;
    } else {
      Usage();
    }
  }
  args.generator.total_gpus = args.nodes * 8;
  return args;
}

double PercentileOf(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  size_t index = static_cast<size_t>(std::ceil(q * values.size()));
  return values[std::clamp<size_t>(index, 1, values.size()) - 1];
}

void PrintResult(const char* name, const MigSimResult& r, double seconds) {
  std::printf("%s:\n", name);
  std::printf("  GPU-hours delivered     %.1f (utilization %.1f%% of %.1f h x fleet)\n",
              r.gpu_hours, 100 * r.utilization, r.horizon_s / 3600);
  std::printf("  wait p50 / p95          %.0f s / %.0f s\n", r.wait_p50_s, r.wait_p95_s);
  std::printf(
      "  requests                %lld: %lld started, %lld waiting at the end, "
      "%lld never placeable\n",
      static_cast<long long>(r.requests), static_cast<long long>(r.started),
      static_cast<long long>(r.waiting_at_end), static_cast<long long>(r.never_placeable));
  for (auto kind : {MigRequestKind::kWhole, MigRequestKind::kMig, MigRequestKind::kShare}) {
    const int k = static_cast<int>(kind);
    std::printf(
        "    %-5s                 %.1f GPU-hours, p95 wait %.0f s, %lld waiting at the end\n",
        MigRequestKindName(kind), r.gpu_hours_by_kind[k], r.wait_p95_s_by_kind[k],
        static_cast<long long>(r.waiting_by_kind[k]));
  }
  std::printf("  simulated in            %.2f s\n", seconds);
}

Result<std::vector<MigTraceRequest>> LoadTrace(const Args& args) {
  if (args.trace_path.empty()) return GenerateMigTrace(args.generator);
  auto text = ReadBoundedFile(args.trace_path, kMaxMigTraceBytes);
  if (!text) return text.error();
  return ParseMigTrace(*text);
}

template <typename F>
auto Timed(F&& f, double& seconds) {
  auto begin = std::chrono::steady_clock::now();
  auto result = f();
  seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = ParseArgs(argc, argv);
  auto trace = LoadTrace(args);
  if (!trace) {
    std::fprintf(stderr, "bench_mig_fleet: %s\n", trace.error().message.c_str());
    return 1;
  }
  if (args.generate) {
    std::fputs(MigTraceToText(*trace).c_str(), stdout);
    return 0;
  }
  std::printf("fleet: %d nodes x 8 H100 80GB (%d GPUs); trace: %s, %zu requests\n", args.nodes,
              args.nodes * 8,
              args.trace_path.empty()
                  ? ("generated, seed " + std::to_string(args.generator.seed)).c_str()
                  : args.trace_path.c_str(),
              trace->size());
  MigSimOptions options;
  options.nodes = args.nodes;
  options.policy = MigPolicy::kByDemand;
  options.time_decisions = true;
  double seconds = 0;
  auto demand = Timed([&] { return SimulateMigFleet(*trace, options); }, seconds);
  if (!demand) {
    std::fprintf(stderr, "bench_mig_fleet: %s\n", demand.error().message.c_str());
    return 1;
  }
  PrintResult("(a) MIG by demand", *demand, seconds);
  std::printf(
      "  reconfigurations        %.1f per hour (%lld created, %lld destroyed, "
      "%lld mode changes)\n",
      demand->reconfigurations_per_hour, static_cast<long long>(demand->instances_created),
      static_cast<long long>(demand->instances_destroyed),
      static_cast<long long>(demand->mode_changes));
  const auto& us = demand->decision_us;
  std::printf(
      "  decision time           %zu MIG decisions: p50 %.1f us, p99 %.1f us, "
      "max %.1f us\n",
      us.size(), PercentileOf(us, 0.5), PercentileOf(us, 0.99),
      us.empty() ? 0 : *std::max_element(us.begin(), us.end()));
  if (!args.search) return 0;
  auto best =
      Timed([&] { return SearchStaticLayouts(*trace, options, args.search_budget); }, seconds);
  if (!best) {
    std::fprintf(stderr, "bench_mig_fleet: %s\n", best.error().message.c_str());
    return 1;
  }
  PrintResult("(b) best static layout in hindsight", best->result, seconds);
  std::printf("  layout                  %s (best of %d splits searched)\n",
              best->split.Describe().c_str(), best->candidates);
  std::printf("by demand / best static: GPU-hours %+.1f%%\n",
              100 * (demand->gpu_hours / best->result.gpu_hours - 1));
  return 0;
}

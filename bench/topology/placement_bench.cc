// Placement speed and quality.
//  1. Decisions per second: a fleet of 100 nodes x 8 GPUs with the HGX partition table kept busy
//     by a churn of 1/2/4/8-GPU requests (weights 45/25/15/15); each decision is one TryPlace.
//  2. GPU-set scoring: exact best set of 8 out of 16 GPUs.
//  3. Quality: the synthetic trace at 94 % offered load replayed under each policy.
// Single-threaded; pin it to one core with `taskset -c 0` for stable figures.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "placement/placement.h"

using namespace tessera;
using Clock = std::chrono::steady_clock;

namespace {

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

std::shared_ptr<const topology::PartitionPlanner> Hgx() {
  auto planner = topology::PartitionPlanner::Create(topology::HgxH100Table());
  if (!planner) std::abort();
  return *planner;
}

// Keeps the fleet near `target` busy: place while below it, release a random lease above it.
double DecisionsPerSecond(placement::Fleet fleet, placement::Policy policy, double target,
                          int64_t decisions) {
  uint64_t state = 12345;
  auto next = [&] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return state >> 33;
  };
  std::vector<placement::Placement> leases;
  leases.reserve(fleet.total_gpus());
  int busy = 0;
  const int limit = static_cast<int>(target * fleet.total_gpus());
  auto started = Clock::now();
  for (int64_t i = 0; i < decisions; ++i) {
    while (busy >= limit && !leases.empty()) {
      size_t victim = next() % leases.size();
      busy -= topology::MaskSize(leases[victim].gpus);
      (void)fleet.Release(leases[victim]);
      leases[victim] = leases.back();
      leases.pop_back();
    }
    uint64_t pick = next() % 100;
    int gpus = pick < 45 ? 1 : pick < 70 ? 2 : pick < 85 ? 4 : 8;
    placement::Placement p;
    if (fleet.TryPlace(gpus, policy, &p)) {
      busy += gpus;
      leases.push_back(p);
    } else if (!leases.empty()) {
      size_t victim = next() % leases.size();
      busy -= topology::MaskSize(leases[victim].gpus);
      (void)fleet.Release(leases[victim]);
      leases[victim] = leases.back();
      leases.pop_back();
    }
  }
  return decisions / Seconds(started);
}

}  // namespace

int main(int argc, char** argv) {
  const int requests = argc > 1 ? std::atoi(argv[1]) : 50000;

  std::printf("== Placement decisions per second (100 nodes x 8 GPUs, one thread)\n");
  const auto policies = {placement::Policy::kBinpack, placement::Policy::kSpread,
                         placement::Policy::kFirstFit};
  for (double target : {0.5, 0.9}) {
    for (placement::Policy policy : policies) {
      auto fleet = placement::Fleet::Uniform(100, 8, Hgx());
      double rate = DecisionsPerSecond(std::move(*fleet), policy, target, 4000000);
      std::printf(
          "  HGX partitions  %-9s  fleet ~%2.0f %% busy  %10.0f decisions/s  (%.0f ns each)\n",
          placement::PolicyName(policy), target * 100, rate, 1e9 / rate);
    }
  }
  for (placement::Policy policy : policies) {
    auto fleet = placement::Fleet::Uniform(100, 8, Hgx(), placement::FleetOptions{false});
    double rate = DecisionsPerSecond(std::move(*fleet), policy, 0.9, 1000000);
    std::printf(
        "  HGX, no cache   %-9s  fleet ~90 %% busy  %10.0f decisions/s  (scores computed "
        "per decision)\n",
        placement::PolicyName(policy), rate);
  }
  for (placement::Policy policy : policies) {
    auto fleet = placement::Fleet::Uniform(100, 8, nullptr);
    double rate = DecisionsPerSecond(std::move(*fleet), policy, 0.9, 4000000);
    std::printf("  no table        %-9s  fleet ~90 %% busy  %10.0f decisions/s\n",
                placement::PolicyName(policy), rate);
  }

  std::printf("\n== Exact GPU-set scoring (no table)\n");
  {
    topology::GpuTopology box;
    for (int i = 0; i < 16; ++i) {
      char pci[16];
      std::snprintf(pci, sizeof pci, "0000:%02x:00.0", 0x10 + i);
      box.gpus.push_back(
          {pci, pci, i / 8, {"0000:f" + std::to_string(i / 4) + ":00.0", "0000:00:01.0"}});
    }
    auto started = Clock::now();
    auto scorer = topology::GpuSetScorer::Create(box);
    double build = Seconds(started);
    if (!scorer) return 1;
    const int calls = 2000;
    int64_t sink = 0;
    started = Clock::now();
    for (int i = 0; i < calls; ++i) {
      auto chosen = (*scorer)->Choose(0xffff & ~(topology::GpuMask(i) & 0x3), 8);
      sink += chosen.ok() ? static_cast<int64_t>(*chosen) : 0;
    }
    double per_call = Seconds(started) / calls;
    std::printf(
        "  16 GPUs: precompute %.2f ms; best 8 of 14..16 in %.1f us per call (C(16,8) = "
        "12870 sets)%s\n",
        build * 1e3, per_call * 1e6, sink == 0 ? " !" : "");
  }

  std::printf("\n== Quality: 100 nodes x 8 GPUs, HGX table on every node, no queue\n");
  std::printf(
      "   trace: %d requests, Poisson arrivals at 94 %% offered load, sizes 1/2/4/8 "
      "weighted 45/25/15/15,\n   log-normal durations (median 3600 s, sigma 1.0)\n",
      requests);
  std::printf("  %-5s %-9s %8s %7s %7s %7s %7s %9s %9s %8s %12s\n", "seed", "policy", "admitted",
              "1-GPU", "2-GPU", "4-GPU", "8-GPU", "offer GPUh", "serve GPUh", "served",
              "decisions/s");
  for (uint64_t seed : {1, 2, 3, 4, 5}) {
    placement::SyntheticOptions options;
    options.seed = seed;
    options.load = 0.94;
    options.total_gpus = 800;
    options.requests = requests;
    auto trace = placement::SyntheticTrace(options);
    if (!trace) return 1;
    std::map<placement::Policy, placement::SimulationResult> results;
    for (placement::Policy policy : policies) {
      auto fleet = placement::Fleet::Uniform(100, 8, Hgx());
      auto result = placement::Simulate(std::move(*fleet), *trace, {policy, false});
      if (!result) return 1;
      const auto& r = *result;
      auto by = [&](int size) {
        auto it = r.admitted_by_size.find(size);
        return it == r.admitted_by_size.end() ? int64_t{0} : it->second;
      };
      std::printf("  %-5llu %-9s %8lld %7lld %7lld %7lld %7lld %9.0f %9.0f %7.2f%% %12.0f\n",
                  static_cast<unsigned long long>(seed), r.policy.c_str(),
                  static_cast<long long>(r.admitted), static_cast<long long>(by(1)),
                  static_cast<long long>(by(2)), static_cast<long long>(by(4)),
                  static_cast<long long>(by(8)), r.offered_gpu_hours, r.served_gpu_hours,
                  100 * r.served_gpu_hours / r.offered_gpu_hours, r.decisions / r.elapsed_s);
      results[policy] = r;
    }
    const auto& b = results[placement::Policy::kBinpack];
    const auto& s = results[placement::Policy::kSpread];
    const auto& f = results[placement::Policy::kFirstFit];
    double ratio = static_cast<double>(b.admitted_by_size.at(8)) /
                   std::max<int64_t>(1, s.admitted_by_size.count(8) ? s.admitted_by_size.at(8) : 0);
    std::printf(
        "        binpack/spread 8-GPU admitted: %.1fx; binpack - first-fit GPU-hours: "
        "%+.0f\n",
        ratio, b.served_gpu_hours - f.served_gpu_hours);
  }
  return 0;
}

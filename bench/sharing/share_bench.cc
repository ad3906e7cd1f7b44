// Shares of a GPU at fleet scale, the pure parts the service runs under its lock:
// - placement: 10,000 pending share requests of 100 tenancies (memory 1-40 GiB, compute 5-50 %,
//   MPS and time-slicing 9:1) onto 800 GPUs of 80 GB, each placed as the scheduler's share pass
//   does it now (sharing::PlacementIndex, built from the GPUs first) and as it did before (a walk
//   over every GPU, sharing::ChooseGpu, with its reason for those that wait); per decision, that
//   both choose the same GPU every time, and a check that no GPU's shares ever add up past its
//   memory less the reserve;
// - the watchdog: one sample of 2,000 share containers with 2 GPU processes each (summed per
//   container, then judged against each share's memory), 5 % of them over their share.
// Single-threaded; pin it to one core with `taskset -c 0` for stable figures. Both wall time and
// this thread's CPU time are reported.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sharing/sharing.h"
#include "support/figures.h"

using namespace tessera;
using Clock = std::chrono::steady_clock;

namespace {

using bench::ThreadCpuSeconds;

bench::SeededSequence sequence;
uint64_t Next() {
  return sequence.Next();
}

constexpr uint64_t kBoard = 81559 * sharing::kMiB;  // H100 80GB as NVML reports it

struct Request {
  sharing::Share share;
  std::string tenancy;
};

std::vector<Request> Requests(int count, int tenancies) {
  std::vector<Request> out;
  out.reserve(count);
  for (int i = 0; i < count; ++i) {
    Request request;
    request.share.memory_bytes = (1 + Next() % 40) * sharing::kGiB;
    request.share.compute_percent = static_cast<int>(5 + Next() % 46);
    request.share.mode = Next() % 10 == 0 ? sharing::Mode::kTimeslice : sharing::Mode::kMps;
    request.tenancy = "uid-" + std::to_string(Next() % tenancies);
    out.push_back(std::move(request));
  }
  return out;
}

// The same requests through the index, as the share pass places them: the index built from the
// GPUs, then one decision per request. Fails when it ever chooses another GPU than the walk.
int IndexedPlacement(int repeats) {
  constexpr int kGpus = 800, kRequests = 10000, kTenancies = 100;
  sequence = bench::SeededSequence();  // the very requests Placement placed
  const auto requests = Requests(kRequests, kTenancies);
  sharing::PlacementRules rules;
  double best_wall = 1e9, best_cpu = 1e9, best_build = 1e9;
  int placed = 0;
  for (int round = 0; round < repeats; ++round) {
    std::vector<sharing::SharedGpu> gpus(kGpus);
    for (auto& gpu : gpus) {
      gpu.memory_bytes = kBoard;
      gpu.placeable = true;
    }
    placed = 0;
    const auto build0 = Clock::now();
    sharing::PlacementIndex index(rules);
    for (size_t i = 0; i < gpus.size(); ++i)
      index.Set(i, gpus[i]);
    const double build = std::chrono::duration<double>(Clock::now() - build0).count();
    std::vector<std::optional<size_t>> chosen(requests.size());
    const double cpu0 = ThreadCpuSeconds();
    const auto wall0 = Clock::now();
    for (size_t r = 0; r < requests.size(); ++r) {
      chosen[r] = index.Choose(requests[r].share, requests[r].tenancy);
      if (!chosen[r]) continue;
      index.Add(*chosen[r], requests[r].share, requests[r].tenancy);
      ++placed;
    }
    const double wall = std::chrono::duration<double>(Clock::now() - wall0).count();
    const double cpu = ThreadCpuSeconds() - cpu0;
    best_wall = std::min(best_wall, wall);
    best_cpu = std::min(best_cpu, cpu);
    best_build = std::min(best_build, build);
    if (round > 0) continue;
    // The first round again through the walk: the very same choices.
    for (size_t r = 0; r < requests.size(); ++r) {
      auto walked = sharing::ChooseGpu(gpus, requests[r].share, requests[r].tenancy, rules);
      if (walked.ok() != chosen[r].has_value() || (walked.ok() && *walked != *chosen[r])) {
        std::printf("DIFFERENT: request %zu: the walk and the index chose differently\n", r);
        return 1;
      }
      if (!walked.ok()) continue;
      gpus[*walked].held.push_back(requests[r].share);
      gpus[*walked].tenancy_uid = requests[r].tenancy;
    }
  }
  std::printf(
      "placement (index): %d placed, the same GPU as the walk for every request; index built in "
      "%.2f ms\n",
      placed, best_build * 1e3);
  std::printf("placement (index): pass %.2f ms wall, %.2f ms cpu; %.3f us wall per decision\n",
              best_wall * 1e3, best_cpu * 1e3, best_wall * 1e6 / kRequests);
  return 0;
}

int Placement(int repeats) {
  constexpr int kGpus = 800, kRequests = 10000, kTenancies = 100;
  const auto requests = Requests(kRequests, kTenancies);
  sharing::PlacementRules rules;
  double best_wall = 1e9, best_cpu = 1e9;
  int placed = 0;
  uint64_t held_total = 0;
  for (int round = 0; round < repeats; ++round) {
    std::vector<sharing::SharedGpu> gpus(kGpus);
    for (auto& gpu : gpus) {
      gpu.memory_bytes = kBoard;
      gpu.placeable = true;
    }
    placed = 0;
    const double cpu0 = ThreadCpuSeconds();
    const auto wall0 = Clock::now();
    for (const auto& request : requests) {
      auto chosen = sharing::ChooseGpu(gpus, request.share, request.tenancy, rules);
      if (!chosen) continue;
      gpus[*chosen].held.push_back(request.share);
      gpus[*chosen].tenancy_uid = request.tenancy;
      ++placed;
    }
    const double wall = std::chrono::duration<double>(Clock::now() - wall0).count();
    const double cpu = ThreadCpuSeconds() - cpu0;
    best_wall = std::min(best_wall, wall);
    best_cpu = std::min(best_cpu, cpu);
    held_total = 0;
    for (const auto& gpu : gpus) {
      uint64_t held = 0;
      int compute = 0;
      for (const auto& share : gpu.held) {
        held += share.memory_bytes;
        compute += share.compute_percent;
      }
      if (held > gpu.memory_bytes - rules.reserve_bytes || compute > 100) {
        std::printf("OVERCOMMITTED: a GPU holds %llu MiB, %d %%\n",
                    static_cast<unsigned long long>(held / sharing::kMiB), compute);
        return 1;
      }
      held_total += held;
    }
  }
  std::printf(
      "placement: %d requests, %d tenancies, %d GPUs: %d placed, %.1f %% of shareable memory "
      "held, never overcommitted\n",
      kRequests, kTenancies, kGpus, placed,
      100.0 * static_cast<double>(held_total) /
          (static_cast<double>(kGpus) * static_cast<double>(kBoard - rules.reserve_bytes)));
  std::printf(
      "placement (walk, as before): pass %.1f ms wall, %.1f ms cpu; %.2f us wall per "
      "decision\n",
      best_wall * 1e3, best_cpu * 1e3, best_wall * 1e6 / kRequests);
  return 0;
}

int WatchdogSample(int repeats) {
  constexpr int kContainers = 2000;
  std::map<std::string, uint64_t> limits;
  std::vector<sharing::ProcessUse> processes;
  int over = 0;
  for (int i = 0; i < kContainers; ++i) {
    const std::string id = "c-" + std::to_string(1000000 + i);
    const uint64_t limit = (1 + Next() % 40) * sharing::kGiB;
    limits[id] = limit;
    const bool breaks = i % 20 == 0;
    over += breaks;
    const uint64_t each = breaks ? limit / 2 + sharing::kGiB : limit / 3;
    processes.push_back({static_cast<uint32_t>(10000 + 2 * i), id, each});
    processes.push_back({static_cast<uint32_t>(10001 + 2 * i), id, each});
  }
  double best_wall = 1e9, best_cpu = 1e9;
  size_t breaches = 0;
  for (int round = 0; round < repeats; ++round) {
    sharing::Watchdog watchdog(std::chrono::milliseconds(10000));
    const auto t0 = sharing::Watchdog::Clock::now();
    watchdog.Observe(t0, limits, sharing::SumByContainer(processes));  // starts the grace
    const double cpu0 = ThreadCpuSeconds();
    const auto wall0 = Clock::now();
    auto found =
        watchdog.Observe(t0 + std::chrono::seconds(11), limits, sharing::SumByContainer(processes));
    const double wall = std::chrono::duration<double>(Clock::now() - wall0).count();
    const double cpu = ThreadCpuSeconds() - cpu0;
    best_wall = std::min(best_wall, wall);
    best_cpu = std::min(best_cpu, cpu);
    breaches = found.size();
  }
  if (breaches != static_cast<size_t>(over)) {
    std::printf("WRONG: %zu breaches, %d containers over\n", breaches, over);
    return 1;
  }
  std::printf("watchdog: %d containers, %zu processes, %zu over their share past the grace\n",
              kContainers, processes.size(), breaches);
  std::printf("watchdog: one sample %.2f ms wall, %.2f ms cpu\n", best_wall * 1e3, best_cpu * 1e3);
  return 0;
}

}  // namespace

int main() {
  if (int rc = Placement(5); rc != 0) return rc;
  if (int rc = IndexedPlacement(5); rc != 0) return rc;
  return WatchdogSample(20);
}

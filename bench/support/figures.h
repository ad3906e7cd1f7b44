#pragma once
// Small pieces the benchmarks share: CPU time of the calling thread, a seeded generator whose
// sequence is the same on every run, and one line of latency percentiles.
#include <cstdint>
#include <string>
#include <vector>

namespace tessera::bench {

// CPU seconds the calling thread has used (CLOCK_THREAD_CPUTIME_ID).
double ThreadCpuSeconds();

// A 64-bit linear congruential generator (Knuth's MMIX constants): the same workload every run.
class SeededSequence {
 public:
  explicit SeededSequence(uint64_t seed = 12345) : state_(seed) {}
  uint64_t Next() {
    state_ = state_ * 6364136223846793005ULL + 1442695040888963407ULL;
    return state_ >> 33;
  }

 private:
  uint64_t state_;
};

// "<n> <what>, p50 1.23 ms, p99 4.56 ms, max 7.89 ms" from samples in milliseconds.
std::string LatencyPercentiles(std::vector<double> milliseconds, const char* what);

}  // namespace tessera::bench

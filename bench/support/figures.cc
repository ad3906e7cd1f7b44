#include "support/figures.h"

#include <time.h>

#include <algorithm>
#include <cstdio>

namespace tessera::bench {

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

std::string LatencyPercentiles(std::vector<double> milliseconds, const char* what) {
  if (milliseconds.empty()) return "no samples";
  std::sort(milliseconds.begin(), milliseconds.end());
  auto at = [&](double q) {
    return milliseconds[static_cast<size_t>(q * (milliseconds.size() - 1))];
  };
  char text[200];
  std::snprintf(text, sizeof(text), "%zu %s, p50 %.2f ms, p99 %.2f ms, max %.2f ms",
                milliseconds.size(), what, at(0.5), at(0.99), milliseconds.back());
  return text;
}

}  // namespace tessera::bench

// What choosing a host port for a published container port costs, with the range nearly full:
// --publish-ports 30000-32767 (2,768 ports), 10,000 live containers of which all but 8 of the
// ports are held. Each round one holder ends and a new container takes a port; the decision
// (PortAllocator::Take) is timed alone, then with the host's bind() test of each candidate on
// 127.0.0.1 as the service makes it. Prints p50/p99/max in microseconds.
//
// Usage: ports_bench [ROUNDS] (default 20000)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "serve/host_ports.h"
#include "serve/port_allocator.h"

namespace {

using namespace tessera;
using Clock = std::chrono::steady_clock;

constexpr int kLow = 30000;
constexpr int kHigh = 32767;
constexpr int kLive = 10000;
constexpr int kFree = 8;

struct Figures {
  double p50 = 0, p99 = 0, max = 0;
};

Figures Percentiles(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  auto at = [&us](double q) {
    return us[static_cast<size_t>(q * static_cast<double>(us.size() - 1))];
  };
  return {at(0.50), at(0.99), us.back()};
}

Figures Run(int rounds, const std::function<bool(int)>& usable) {
  serve::PortAllocator ports(kLow, kHigh);
  const int range = kHigh - kLow + 1;
  // Live containers c0..c9999; the first range-kFree of them hold a port each.
  std::vector<std::string> holders;
  for (int i = 0; i < range - kFree; ++i) {
    const std::string owner = "c" + std::to_string(i);
    if (!ports.Take(owner, 1, nullptr)) std::abort();
    holders.push_back(owner);
  }
  std::mt19937 random(42);
  std::vector<double> us;
  us.reserve(static_cast<size_t>(rounds));
  int next = kLive;
  for (int round = 0; round < rounds; ++round) {
    const size_t ending = random() % holders.size();
    ports.Release(holders[ending]);
    const std::string owner = "c" + std::to_string(next++);
    const auto start = Clock::now();
    auto taken = ports.Take(owner, 1, usable);
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    if (!taken) std::abort();
    holders[ending] = owner;
  }
  return Percentiles(std::move(us));
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 20000;
  if (rounds <= 0) return 2;
  std::printf("range %d-%d (%d ports), %d live containers, %d ports free, %d rounds\n", kLow, kHigh,
              kHigh - kLow + 1, kLive, kFree, rounds);
  const auto pure = Run(rounds, nullptr);
  std::printf("decision alone:          p50 %.2f us  p99 %.2f us  max %.2f us\n", pure.p50,
              pure.p99, pure.max);
  const auto tested =
      Run(rounds, [](int port) { return serve::HostPortFree("127.0.0.1", port, "tcp"); });
  std::printf("with the bind() test:    p50 %.2f us  p99 %.2f us  max %.2f us\n", tested.p50,
              tested.p99, tested.max);
  return 0;
}

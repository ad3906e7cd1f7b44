// What hostile clients cost a real tessera-serve (null backend, durable store), printed as
// figures:
//  1. RSS before and after N unauthenticated connections that each announce a 1 MiB body and
//     send 256 KiB of it;
//  2. /healthz latency (p50, p99, max over M probes on a connection of its own) while other
//     clients fetch the largest container page the limits allow, over and over;
//  3. CPU time of the server over 3 s while 300 connections are open under a 128-descriptor
//     limit.
//
// Usage: hostile_bench [--connections N (200)] [--probes M (500)]
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <thread>

#include "serve/raw_http.h"
#include "serve/serve_process.h"

namespace {

using namespace tessera;
using namespace tessera::testing;
using Clock = std::chrono::steady_clock;

long StatusKiB(pid_t pid, const char* field) {
  std::string status = ReadText("/proc/" + std::to_string(pid) + "/status");
  auto at = status.find(field);
  if (at == std::string::npos) return -1;
  return std::stol(status.substr(at + std::strlen(field)));
}

long CpuTicks(pid_t pid) {
  std::string stat = ReadText("/proc/" + std::to_string(pid) + "/stat");
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));
  std::string field;
  long total = 0;
  for (int i = 3; fields >> field && i <= 15; ++i)
    if (i >= 14) total += std::stol(field);
  return total;
}

std::unique_ptr<ServeProcess> StartServe(const std::string& dir, const std::string& root) {
  auto serve = std::make_unique<ServeProcess>(
      dir, std::vector<std::string>{"--root", root, "--backend", "null", "--cdi-dir", dir + "/cdi",
                                    "--cdi-kind", "tessera-test.example/gpu"});
  std::string log;
  if (!serve->Start(&log)) {
    std::fprintf(stderr, "tessera-serve did not start: %s\n", log.c_str());
    std::exit(1);
  }
  return serve;
}

void UnauthenticatedBodies(const std::string& root, int connections) {
  TempDir dir;
  auto serve = StartServe(dir.path(), root);
  const long before = StatusKiB(serve->pid(), "VmRSS:");
  std::vector<std::unique_ptr<RawConnection>> open;
  const std::string chunk(64 * 1024, 'x');
  for (int i = 0; i < connections; ++i) {
    auto raw = std::make_unique<RawConnection>(serve->port());
    raw->Send("POST /v1/containers HTTP/1.1\r\nHost: b\r\nContent-Length: 1048576\r\n\r\n");
    for (int c = 0; c < 4 && raw->Send(chunk); ++c) {
    }
    open.push_back(std::move(raw));
  }
  const long after = StatusKiB(serve->pid(), "VmRSS:");
  int answered = 0;
  for (auto& raw : open)
    answered += FirstStatus(raw->Receive(std::chrono::seconds(30), "\r\n\r\n")) == 401;
  std::printf(
      "unauthenticated 1 MiB bodies: %d connections, RSS %.1f MB -> %.1f MB (+%.1f MB), "
      "%d answered 401, peak RSS %.1f MB\n",
      connections, before / 1024.0, after / 1024.0, (after - before) / 1024.0, answered,
      StatusKiB(serve->pid(), "VmHWM:") / 1024.0);
}

void HealthDuringLargeListings(const std::string& root, int probes) {
  TempDir dir;
  auto serve = StartServe(dir.path(), root);
  auto admin = serve->Connect(serve->admin_token());
  // Records as large as a submission may be (env values up to the 256 KiB spec limit).
  nlohmann::json env = nlohmann::json::object();
  for (int i = 0; i < 7; ++i)
    env["V" + std::to_string(i)] = std::string(32 * 1024 - 16, 'v');
  const std::string body =
      nlohmann::json{{"image", "busybox"}, {"tenancy", "alpha"}, {"env", env}}.dump();
  for (int i = 0; i < 200; ++i)
    (void)admin->Call("POST", "/v1/containers", body, {});
  std::atomic<bool> stop{false};
  std::atomic<long> pages{0}, page_bytes{0};
  std::vector<std::thread> listers;
  for (int t = 0; t < 2; ++t) {
    listers.emplace_back([&] {
      auto connection = serve->Connect(serve->admin_token());
      while (!stop) {
        auto page = connection->Call("GET", "/v1/containers?limit=1000", "", {});
        if (page) {
          pages++;
          page_bytes = static_cast<long>(page->body.size());
        }
      }
    });
  }
  auto probe = serve->Connect("");
  std::vector<double> latencies;
  for (int i = 0; i < probes; ++i) {
    auto start = Clock::now();
    auto answer = probe->Call("GET", "/healthz", "", {});
    latencies.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    if (!answer) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  stop = true;
  for (auto& lister : listers)
    lister.join();
  std::sort(latencies.begin(), latencies.end());
  auto at = [&](double q) { return latencies[static_cast<size_t>(q * (latencies.size() - 1))]; };
  std::printf(
      "healthz during listings: %zu probes while 2 clients fetched %ld pages of %.1f MB: "
      "p50 %.2f ms, p99 %.2f ms, max %.2f ms; server peak RSS %.1f MB\n",
      latencies.size(), pages.load(), page_bytes.load() / 1e6, at(0.5), at(0.99), latencies.back(),
      StatusKiB(serve->pid(), "VmHWM:") / 1024.0);
}

void DescriptorFlood(const std::string& root) {
  TempDir dir;
  rlimit saved{};
  ::getrlimit(RLIMIT_NOFILE, &saved);
  rlimit low = saved;
  low.rlim_cur = 128;
  ::setrlimit(RLIMIT_NOFILE, &low);
  auto serve = StartServe(dir.path(), root);
  ::setrlimit(RLIMIT_NOFILE, &saved);
  std::vector<std::unique_ptr<RawConnection>> flood;
  for (int i = 0; i < 300; ++i)
    flood.push_back(std::make_unique<RawConnection>(serve->port()));
  const long before = CpuTicks(serve->pid());
  std::this_thread::sleep_for(std::chrono::seconds(3));
  const long used = CpuTicks(serve->pid()) - before;
  flood.clear();
  auto probe = serve->Connect("");
  auto answer = probe->Call("GET", "/healthz", "", {});
  std::printf(
      "descriptor flood: 300 connections, RLIMIT_NOFILE 128: server CPU %.2f s in 3 s; "
      "healthz afterwards: %d\n",
      used / static_cast<double>(::sysconf(_SC_CLK_TCK)), answer ? answer->status : 0);
}

}  // namespace

int main(int argc, char** argv) {
  int connections = 200, probes = 500;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--connections") == 0) connections = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--probes") == 0) probes = std::atoi(argv[i + 1]);
  }
  const std::string root = MaterializeHost("hgx-h100-dgx");
  std::printf("load average at start: %s\n", Trimmed(ReadText("/proc/loadavg")).c_str());
  UnauthenticatedBodies(root, connections);
  HealthDuringLargeListings(root, probes);
  DescriptorFlood(root);
  return 0;
}

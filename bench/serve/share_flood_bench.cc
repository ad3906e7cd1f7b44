// One tenancy floods `tessera serve` with shares of a GPU that cannot be placed (every GPU of the
// 8-GPU HGX fixture drained, the stand-in NVML's memory so that they are shareable, null backend,
// durable store), on top of 10,000 pending shares of 100 tenancies. Printed:
//  1. submissions/s of the flood (wrk, a separate process);
//  2. another tenancy's share submission latency (p50, p99, max) during the flood;
//  3. the scheduling passes run while the queue filled and during the flood (tessera_scheduling_
//     passes_total), and the scheduling threads' CPU;
//  4. then one GPU opens: the passes and the time until a waiting share is placed.
//
// Usage: share_flood_bench [--seconds S (10)] [--connections C (32)]
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <regex>
#include <thread>

#include "serve/serve_process.h"
#include "support/fake_nvml_state.h"
#include "support/figures.h"

namespace {

using namespace tessera;
using namespace tessera::testing;
using Clock = std::chrono::steady_clock;

std::string Match(const std::string& text, const std::string& pattern) {
  std::smatch match;
  if (std::regex_search(text, match, std::regex(pattern))) return match[1];
  return "?";
}

// User + system CPU ticks of the threads of `pid` whose name starts with `prefix`.
long ThreadTicks(pid_t pid, const std::string& prefix) {
  const std::string task_dir = "/proc/" + std::to_string(pid) + "/task";
  long total = 0;
  DIR* dir = ::opendir(task_dir.c_str());
  if (!dir) return -1;
  while (dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    const std::string base = task_dir + "/" + entry->d_name;
    if (Trimmed(ReadText(base + "/comm")).rfind(prefix, 0) != 0) continue;
    const std::string stat = ReadText(base + "/stat");
    const auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(stat.substr(close + 2));
    std::string field;
    for (int i = 3; fields >> field; ++i) {
      if (i == 14 || i == 15) total += std::stol(field);
      if (i == 15) break;
    }
  }
  ::closedir(dir);
  return total;
}

uint64_t Metric(ServeProcess& serve, const std::string& pattern) {
  auto metrics = serve.Connect(serve.admin_token())->Call("GET", "/metrics");
  const std::string value = Match(metrics ? metrics->body : "", pattern);
  return value == "?" ? 0 : std::stoull(value);
}

uint64_t Passes(ServeProcess& serve) {
  return Metric(serve, "tessera_scheduling_passes_total (\\d+)");
}

uint64_t Pending(ServeProcess& serve) {
  return Metric(serve, "tessera_containers\\{state=\"pending\"\\} (\\d+)");
}

std::string ShareBody(const std::string& tenancy) {
  return R"({"image":"busybox","tenancy":")" + tenancy +
         R"(","share":{"memory":"10Gi","compute":10,"mode":"timeslice"}})";
}

// Another tenancy submits a share once every 20 ms on a connection of its own while `running`.
std::vector<double> OtherTenancy(ServeProcess& serve, const std::string& token,
                                 std::atomic<bool>& running) {
  std::vector<double> latencies;
  auto connection = serve.Connect(token);
  while (running) {
    const auto start = Clock::now();
    auto answer = connection->Call("POST", "/v1/containers", ShareBody("other"), {});
    latencies.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    if (!answer || answer->status != 202) {
      std::fprintf(stderr, "other tenancy's submission failed: %s\n",
                   answer ? answer->body.c_str() : answer.error().message.c_str());
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return latencies;
}

std::string Percentiles(std::vector<double> values) {
  return bench::LatencyPercentiles(std::move(values), "submissions");
}

}  // namespace

int main(int argc, char** argv) {
  int seconds = 10, connections = 32;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--seconds")) seconds = std::stoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--connections")) connections = std::stoi(argv[i + 1]);
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  TempHost host("hgx-h100-dgx");
  const auto gpus = WriteGpuRoms(host.root());
  FakeNvmlState nvml("");
  for (size_t i = 0; i < gpus.size(); ++i)
    nvml.Append("gpu " + gpus[i] + " board=h100-80gb uuid=GPU-5e4b7c1" + std::to_string(i) +
                "-3c2a-4d8e-9f10-a1b2c3d4e5f" + std::to_string(i));
  TempDir dir;
  ServeProcess serve(dir.path(), {"--root", host.root(), "--backend", "null", "--cdi-dir",
                                  dir.path() + "/cdi", "--cdi-kind", "tessera-bench.example/gpu",
                                  "--nvml", FAKE_NVML, "--mps-root", dir.path() + "/mps"});
  std::string log;
  if (!serve.Start(&log)) {
    std::fprintf(stderr, "tessera-serve did not start:\n%s\n", log.c_str());
    return 1;
  }
  auto admin = serve.Connect(serve.admin_token());
  for (const auto& pci : gpus) {
    int status = 0;
    auto answer = CallJson(*admin, "POST", "/v1/gpus/" + pci + "/drain", "", &status);
    if (status != 200) {
      std::fprintf(stderr, "drain %s: HTTP %d %s\n", pci.c_str(), status, answer.dump().c_str());
      return 1;
    }
  }
  CallJson(*admin, "PUT", "/v1/tenancies/flood", R"({"quota":{"pending":null}})");
  CallJson(*admin, "PUT", "/v1/tenancies/other", "{}");
  const std::string other_token =
      CallJson(*admin, "POST", "/v1/tenancies/other/tokens")["token"].get<std::string>();
  const pid_t pid = serve.pid();
  std::printf(
      "== shares that fit nowhere: 8 GPUs drained, null backend, SQLite WAL synchronous=FULL\n");
  std::printf("load average: %s\n", Trimmed(ReadText("/proc/loadavg")).c_str());

  // 10,000 pending shares of 100 tenancies, from 8 connections.
  constexpr int kTenancies = 100, kEach = 100, kFillers = 8;
  const uint64_t passes_empty = Passes(serve);
  const auto fill0 = Clock::now();
  std::atomic<int> failed{0};
  {
    std::vector<std::thread> fillers;
    for (int f = 0; f < kFillers; ++f)
      fillers.emplace_back([&, f] {
        auto connection = serve.Connect(serve.admin_token());
        for (int t = f; t < kTenancies; t += kFillers)
          for (int i = 0; i < kEach; ++i) {
            auto answer =
                connection->Call("POST", "/v1/containers", ShareBody("t" + std::to_string(t)), {});
            if (!answer || answer->status != 202) failed++;
          }
      });
    for (auto& filler : fillers)
      filler.join();
  }
  const double fill_s = std::chrono::duration<double>(Clock::now() - fill0).count();
  if (failed > 0) {
    std::fprintf(stderr, "%d submissions failed while filling\n", failed.load());
    return 1;
  }
  std::printf(
      "filled: %llu pending shares of %d tenancies in %.1f s (%.0f submissions/s, 8 "
      "connections); %llu passes\n",
      static_cast<unsigned long long>(Pending(serve)), kTenancies, fill_s,
      kTenancies * kEach / fill_s, static_cast<unsigned long long>(Passes(serve) - passes_empty));

  // The flood, with another tenancy submitting beside it.
  const uint64_t passes0 = Passes(serve);
  const uint64_t pending0 = Pending(serve);
  const double hz = static_cast<double>(::sysconf(_SC_CLK_TCK));
  const long sched0 = ThreadTicks(pid, "tessera-sched") + ThreadTicks(pid, "tessera-report");
  std::atomic<bool> running{true};
  std::vector<double> latencies;
  std::thread other([&] { latencies = OtherTenancy(serve, other_token, running); });
  const std::string script = std::string(TESSERA_SOURCE_DIR) + "/bench/serve/share_flood.lua";
  const auto flood0 = Clock::now();
  const std::string out =
      RunCommand("TESSERA_TOKEN=" + serve.admin_token() + " wrk --latency -t2 -c" +
                 std::to_string(connections) + " -d" + std::to_string(seconds) + "s -s " + script +
                 " http://127.0.0.1:" + std::to_string(serve.port()) + " 2>&1");
  const double flood_s = std::chrono::duration<double>(Clock::now() - flood0).count();
  running = false;
  other.join();
  const long sched1 = ThreadTicks(pid, "tessera-sched") + ThreadTicks(pid, "tessera-report");
  std::printf("-- share flood for %d s from %llu pending (wrk -t2 -c%d)\n", seconds,
              static_cast<unsigned long long>(pending0), connections);
  std::printf("flood: %s submissions/s (wrk), latency p50 %s p99 %s, non-2xx: %s\n",
              Match(out, "Requests/sec:\\s+([0-9.]+)").c_str(),
              Match(out, "50%\\s+([0-9.]+\\w+)").c_str(),
              Match(out, "99%\\s+([0-9.]+\\w+)").c_str(),
              out.find("Non-2xx") == std::string::npos
                  ? "0"
                  : Match(out, "Non-2xx or 3xx responses: (\\d+)").c_str());
  std::printf("other tenancy: %s\n", Percentiles(latencies).c_str());
  std::printf("passes during the flood: %llu; scheduling CPU %.4f s/s; pending now %llu\n",
              static_cast<unsigned long long>(Passes(serve) - passes0),
              (sched1 - sched0) / hz / flood_s, static_cast<unsigned long long>(Pending(serve)));

  // One GPU opens: a pass over all that wait places the first in the fair order.
  const uint64_t passes1 = Passes(serve);
  const uint64_t waiting = Pending(serve);
  const auto open0 = Clock::now();
  int status = 0;
  CallJson(*admin, "POST", "/v1/gpus/" + gpus[0] + "/undrain", "", &status);
  while (Pending(serve) >= waiting && Clock::now() - open0 < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  std::printf(
      "one GPU opened (HTTP %d): a share seen placed after %.0f ms (the undrain's commit and "
      "/metrics polls included); %llu passes\n",
      status, std::chrono::duration<double, std::milli>(Clock::now() - open0).count(),
      static_cast<unsigned long long>(Passes(serve) - passes1));
  // The server's own clock: from the GPU freed (under the lock, before the pass) to the first
  // placement the pass made, over everything that waits.
  auto stamp = [](const std::string& log, const std::string& what) -> double {
    const auto at = log.find(what);
    if (at == std::string::npos) return -1;
    const auto line = log.rfind('\n', at) + 1;
    // "[2026-11-29 07:40:33.786] ...": hours, minutes, seconds.milliseconds.
    const std::string time = log.substr(line + 12, 12);
    return (std::stod(time.substr(0, 2)) * 3600 + std::stod(time.substr(3, 2)) * 60 +
            std::stod(time.substr(6))) *
           1000;
  };
  const std::string server_log = serve.log();
  const double freed = stamp(server_log, "draining -> free");
  const double placed = stamp(server_log, ": placed (a timeslice share");
  if (freed >= 0 && placed >= 0)
    std::printf(
        "server log: the GPU freed at +0 ms, the first share placed at +%.0f ms (%llu "
        "shares waited)\n",
        placed - freed, static_cast<unsigned long long>(waiting));
  std::printf("VmHWM at the end: %s\n", ProcStatusField(pid, "VmHWM").c_str());
  serve.Kill(SIGTERM);
  return 0;
}

// One tenancy floods `tessera serve` with GPU requests that cannot be placed (every GPU of the
// 8-GPU HGX fixture drained, null backend, durable store), as the attack on admission did.
// Printed:
//  1. submissions/s as the queue grows, and with 100,000 pending (wrk, a separate process);
//  2. another tenancy's submission latency (p50, p99, max) during the flood, with and without a
//     dashboard reading GET /v1/queue once a second;
//  3. scheduling CPU per second (the scheduler and queue report threads, from
//     /proc/<pid>/task), idle and under the flood, and the passes run;
//  4. RSS with 100,000 pending.
//
// Usage: flood_bench [--pending N (100000)] [--seconds S (10)] [--connections C (32)]
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <regex>
#include <thread>

#include "serve/serve_process.h"
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

// User + system CPU ticks of the threads of `pid` whose name starts with `prefix` ("" for all).
long ThreadTicks(pid_t pid, const std::string& prefix) {
  const std::string task_dir = "/proc/" + std::to_string(pid) + "/task";
  long total = 0;
  DIR* dir = ::opendir(task_dir.c_str());
  if (!dir) return -1;
  while (dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    const std::string base = task_dir + "/" + entry->d_name;
    if (!prefix.empty() && Trimmed(ReadText(base + "/comm")).rfind(prefix, 0) != 0) continue;
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

// CPU seconds per second of wall time, of the scheduling threads and of the whole process.
struct Cpu {
  double scheduling = 0, process = 0;
};
Cpu MeasureCpu(pid_t pid, const std::function<void()>& during) {
  const double hz = static_cast<double>(::sysconf(_SC_CLK_TCK));
  const long sched0 = ThreadTicks(pid, "tessera-sched") + ThreadTicks(pid, "tessera-report");
  const long all0 = ThreadTicks(pid, "");
  const auto start = Clock::now();
  during();
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  const long sched1 = ThreadTicks(pid, "tessera-sched") + ThreadTicks(pid, "tessera-report");
  const long all1 = ThreadTicks(pid, "");
  return {(sched1 - sched0) / hz / wall, (all1 - all0) / hz / wall};
}

uint64_t Metric(ServeProcess& serve, const std::string& pattern) {
  auto metrics = serve.Connect(serve.admin_token())->Call("GET", "/metrics");
  const std::string value = Match(metrics ? metrics->body : "", pattern);
  return value == "?" ? 0 : std::stoull(value);
}

uint64_t Pending(ServeProcess& serve) {
  return Metric(serve, "tessera_containers\\{state=\"pending\"\\} (\\d+)");
}

std::string RunWrk(ServeProcess& serve, int connections, int seconds) {
  const std::string script = std::string(TESSERA_SOURCE_DIR) + "/bench/serve/flood.lua";
  return RunCommand("TESSERA_TOKEN=" + serve.admin_token() + " wrk --latency -t2 -c" +
                    std::to_string(connections) + " -d" + std::to_string(seconds) + "s -s " +
                    script + " http://127.0.0.1:" + std::to_string(serve.port()) + " 2>&1");
}

// Another tenancy submits once every 20 ms on a connection of its own while `running`.
std::vector<double> OtherTenancy(ServeProcess& serve, const std::string& token,
                                 std::atomic<bool>& running) {
  std::vector<double> latencies;
  auto connection = serve.Connect(token);
  while (running) {
    const auto start = Clock::now();
    auto answer = connection->Call("POST", "/v1/containers",
                                   R"({"image":"busybox","tenancy":"other","gpus":1})", {});
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
  uint64_t target = 100000;
  int seconds = 10, connections = 32;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--pending")) target = std::stoull(argv[i + 1]);
    if (!std::strcmp(argv[i], "--seconds")) seconds = std::stoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--connections")) connections = std::stoi(argv[i + 1]);
  }
  TempDir dir;
  const std::string root = MaterializeHost("hgx-h100-dgx");
  ServeProcess serve(dir.path(), {"--root", root, "--backend", "null", "--cdi-dir",
                                  dir.path() + "/cdi", "--cdi-kind", "tessera-bench.example/gpu"});
  std::string log;
  if (!serve.Start(&log)) {
    std::fprintf(stderr, "tessera-serve did not start:\n%s\n", log.c_str());
    return 1;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  auto admin = serve.Connect(serve.admin_token());
  int drained = 0;
  int listed_status = 0;
  const auto listed = CallJson(*admin, "GET", "/v1/gpus", "", &listed_status);
  if (listed_status != 200) {
    std::fprintf(stderr, "GET /v1/gpus: HTTP %d %s\n", listed_status, listed.dump().c_str());
    return 1;
  }
  for (const auto& gpu : listed["gpus"]) {
    int status = 0;
    auto answer = CallJson(*admin, "POST", "/v1/gpus/" + gpu["id"].get<std::string>() + "/drain",
                           "", &status);
    if (status != 200 || answer.value("state", "") != "draining") {
      std::fprintf(stderr, "drain %s: HTTP %d %s\n", gpu["id"].get<std::string>().c_str(), status,
                   answer.dump().c_str());
      return 1;
    }
    ++drained;
  }
  if (drained != 8) {
    std::fprintf(stderr, "drained %d GPUs, not 8\n", drained);
    return 1;
  }
  // The flooding tenancy's policy lifts the default pending quota (10,000); the other keeps it.
  CallJson(*admin, "PUT", "/v1/tenancies/flood", R"({"quota":{"pending":null}})");
  CallJson(*admin, "PUT", "/v1/tenancies/other", "{}");
  const std::string other_token =
      CallJson(*admin, "POST", "/v1/tenancies/other/tokens")["token"].get<std::string>();
  const pid_t pid = serve.pid();

  std::printf(
      "== flood of unplaceable 1-GPU requests: 8 GPUs drained, null backend, "
      "SQLite WAL synchronous=FULL; wrk -t2 -c%d\n",
      connections);
  std::printf("load average: %s\n", Trimmed(ReadText("/proc/loadavg")).c_str());
  Cpu idle_empty = MeasureCpu(pid, [] { std::this_thread::sleep_for(std::chrono::seconds(5)); });
  std::printf("idle, empty queue: scheduling CPU %.4f s/s, process %.4f s/s\n",
              idle_empty.scheduling, idle_empty.process);

  // Fill, printing the rate as the queue grows.
  while (Pending(serve) < target) {
    const uint64_t before = Pending(serve);
    const std::string out = RunWrk(serve, connections, 5);
    std::printf("pending %6llu -> %6llu: %s submissions/s (wrk), non-2xx: %s\n",
                static_cast<unsigned long long>(before),
                static_cast<unsigned long long>(Pending(serve)),
                Match(out, "Requests/sec:\\s+([0-9.]+)").c_str(),
                out.find("Non-2xx") == std::string::npos
                    ? "0"
                    : Match(out, "Non-2xx or 3xx responses: (\\d+)").c_str());
  }
  std::printf("with %llu pending: VmRSS %s, VmHWM %s\n",
              static_cast<unsigned long long>(Pending(serve)),
              ProcStatusField(pid, "VmRSS").c_str(), ProcStatusField(pid, "VmHWM").c_str());
  Cpu idle_full = MeasureCpu(pid, [] { std::this_thread::sleep_for(std::chrono::seconds(5)); });
  std::printf("idle, %llu pending: scheduling CPU %.4f s/s, process %.4f s/s\n",
              static_cast<unsigned long long>(Pending(serve)), idle_full.scheduling,
              idle_full.process);

  {
    // The same submissions without a flood: what the durable commit alone costs here.
    std::atomic<bool> running{true};
    std::vector<double> latencies;
    std::thread other([&] { latencies = OtherTenancy(serve, other_token, running); });
    std::this_thread::sleep_for(std::chrono::seconds(seconds / 2 + 1));
    running = false;
    other.join();
    std::printf("-- no flood, %llu pending\nother tenancy: %s\n",
                static_cast<unsigned long long>(Pending(serve)), Percentiles(latencies).c_str());
  }
  for (bool dashboard : {false, true}) {
    const uint64_t passes0 = Metric(serve, "tessera_scheduling_passes_total (\\d+)");
    const uint64_t reports0 = Metric(serve, "tessera_queue_reports_total (\\d+)");
    const uint64_t pending0 = Pending(serve);
    std::atomic<bool> running{true};
    std::vector<double> latencies, queue_reads;
    std::thread other([&] { latencies = OtherTenancy(serve, other_token, running); });
    std::thread reader([&] {
      if (!dashboard) return;
      auto connection = serve.Connect(serve.admin_token());
      while (running) {
        const auto start = Clock::now();
        (void)connection->Call("GET", "/v1/queue", "", {});
        queue_reads.push_back(
            std::chrono::duration<double, std::milli>(Clock::now() - start).count());
        std::this_thread::sleep_for(std::chrono::seconds(1));
      }
    });
    std::string out;
    Cpu flood = MeasureCpu(pid, [&] { out = RunWrk(serve, connections, seconds); });
    running = false;
    other.join();
    reader.join();
    std::printf("-- flood for %d s from %llu pending%s\n", seconds,
                static_cast<unsigned long long>(pending0),
                dashboard ? ", a dashboard reading GET /v1/queue every second" : "");
    std::printf("flood: %s submissions/s (wrk), latency p50 %s p99 %s, non-2xx: %s\n",
                Match(out, "Requests/sec:\\s+([0-9.]+)").c_str(),
                Match(out, "50%\\s+([0-9.]+\\w+)").c_str(),
                Match(out, "99%\\s+([0-9.]+\\w+)").c_str(),
                out.find("Non-2xx") == std::string::npos
                    ? "0"
                    : Match(out, "Non-2xx or 3xx responses: (\\d+)").c_str());
    std::printf("other tenancy: %s\n", Percentiles(latencies).c_str());
    if (dashboard) std::printf("GET /v1/queue: %s\n", Percentiles(queue_reads).c_str());
    std::printf(
        "scheduling CPU %.4f s/s, process %.4f s/s; %llu passes, %llu queue reports; "
        "pending now %llu\n",
        flood.scheduling, flood.process,
        static_cast<unsigned long long>(Metric(serve, "tessera_scheduling_passes_total (\\d+)") -
                                        passes0),
        static_cast<unsigned long long>(Metric(serve, "tessera_queue_reports_total (\\d+)") -
                                        reports0),
        static_cast<unsigned long long>(Pending(serve)));
  }
  std::printf("VmHWM at the end: %s\n", ProcStatusField(pid, "VmHWM").c_str());
  serve.Kill(SIGTERM);
  return 0;
}

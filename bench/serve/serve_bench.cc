// Benchmarks of `tessera serve`, printed as figures:
//  1. submissions per second and latency percentiles: wrk (a separate load process) POSTing
//     containers over loopback to the real server with the durable store (WAL,
//     synchronous=FULL, group commit); the null backend keeps container starts out of the path;
//  2. peak RSS (VmHWM) of tessera-serve holding 10,000 containers, after a restart that loads
//     them all and a full listing;
//  3. `tessera run --gpus 1 IMAGE true` against bare `podman run` with the same CDI device
//     (--podman; needs root, podman and the fixture host).
//
// Usage: serve_bench [--duration S] [--connections N] [--threads N] [--podman] [--runs N]
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <regex>
#include <thread>

#include "serve/serve_process.h"
#include "support/podman_harness.h"
#include "support/process_timer.h"

namespace {

using namespace tessera;
using namespace tessera::testing;

std::string LoadAverage() {
  return Trimmed(ReadText("/proc/loadavg"));
}

pid_t ServePid(const std::string& data_dir) {
  // The process whose command line names this data dir.
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = ReadText(entry.path().string() + "/cmdline");
    if (cmdline.find("tessera-serve") != std::string::npos &&
        cmdline.find(data_dir) != std::string::npos)
      return static_cast<pid_t>(std::stoi(name));
  }
  return -1;
}

std::string RunWrk(uint16_t port, const std::string& token, int threads, int connections,
                   int seconds) {
  std::string script = std::string(TESSERA_SOURCE_DIR) + "/bench/serve/submit.lua";
  std::string command = "TESSERA_TOKEN=" + token + " wrk --latency -t" + std::to_string(threads) +
                        " -c" + std::to_string(connections) + " -d" + std::to_string(seconds) +
                        "s -s " + script + " http://127.0.0.1:" + std::to_string(port) + " 2>&1";
  return RunCommand(command);
}

std::string Match(const std::string& text, const std::string& pattern) {
  std::smatch match;
  if (std::regex_search(text, match, std::regex(pattern))) return match[1];
  return "?";
}

void Throughput(int duration, int connections, int threads) {
  TempDir dir;
  ServeProcess serve(dir.path(), {"--root", "/", "--backend", "null", "--cdi-dir",
                                  dir.path() + "/cdi", "--io-threads", "1"});
  std::string log;
  if (!serve.Start(&log)) {
    std::fprintf(stderr, "tessera-serve did not start:\n%s\n", log.c_str());
    std::exit(1);
  }
  std::string token = serve.admin_token();
  RunWrk(serve.port(), token, threads, connections, 2);  // warm-up
  std::string before = LoadAverage();
  std::string out = RunWrk(serve.port(), token, threads, connections, duration);
  std::string after = LoadAverage();
  auto metrics = serve.Connect(serve.admin_token())->Call("GET", "/metrics");
  std::string commits = Match(metrics ? metrics->body : "", "tessera_store_commits_total (\\d+)");
  std::string records =
      Match(metrics ? metrics->body : "", "tessera_store_records_written_total (\\d+)");
  std::printf(
      "== submissions: wrk -t%d -c%d -d%ds, POST /v1/containers, null backend, "
      "SQLite WAL synchronous=FULL, group commit\n",
      threads, connections, duration);
  std::printf("requests/s: %s\n", Match(out, "Requests/sec:\\s+([0-9.]+)").c_str());
  std::printf(
      "latency p50: %s  p75: %s  p90: %s  p99: %s\n", Match(out, "50%\\s+([0-9.]+\\w+)").c_str(),
      Match(out, "75%\\s+([0-9.]+\\w+)").c_str(), Match(out, "90%\\s+([0-9.]+\\w+)").c_str(),
      Match(out, "99%\\s+([0-9.]+\\w+)").c_str());
  std::printf("non-2xx answers: %s\n",
              out.find("Non-2xx") == std::string::npos
                  ? "0"
                  : Match(out, "Non-2xx or 3xx responses: (\\d+)").c_str());
  std::printf(
      "store: %s commits, %s records written (whole run incl. warm-up and container "
      "state changes)\n",
      commits.c_str(), records.c_str());
  std::printf("load average before: %s\nload average after:  %s\n", before.c_str(), after.c_str());
  std::printf("--- wrk output ---\n%s\n", out.c_str());
}

void PeakRss(int containers) {
  TempDir dir;
  ServeProcess serve(dir.path(),
                     {"--root", "/", "--backend", "null", "--cdi-dir", dir.path() + "/cdi"});
  if (!serve.Start()) std::exit(1);
  std::string token = serve.admin_token();
  std::atomic<int> next{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 8; ++t) {
    clients.emplace_back([&] {
      auto connection = serve.Connect(token);
      while (next.fetch_add(1) < containers) {
        // Typical bodies: a command and some environment.
        auto response = connection->Call(
            "POST", "/v1/containers",
            R"({"image":"registry.example/team/train:2024.1","tenancy":"bench","command":["python3","train.py","--epochs","10"],"env":{"SEED":"1","RUN":"bench"}})");
        if (!response || response->status != 202) std::exit(1);
      }
    });
  }
  for (auto& client : clients)
    client.join();
  pid_t pid = ServePid(serve.data_dir());
  std::printf("== memory with %d containers in the store\n", containers);
  std::printf("after submitting them: VmHWM %s, VmRSS %s\n", ProcStatusField(pid, "VmHWM").c_str(),
              ProcStatusField(pid, "VmRSS").c_str());
  serve.Kill(SIGTERM);
  if (!serve.Start()) std::exit(1);
  pid = ServePid(serve.data_dir());
  std::printf("after a restart (store loaded): VmHWM %s\n", ProcStatusField(pid, "VmHWM").c_str());
  // Every container, page by page, as a client lists them.
  auto client = serve.Connect(token);
  size_t pages = 0, bytes = 0, listed = 0;
  std::string after;
  for (;;) {
    auto page =
        client->Call("GET", "/v1/containers?limit=1000" + (after.empty() ? "" : "&after=" + after));
    if (!page || page->status != 200) break;
    auto doc = nlohmann::json::parse(page->body);
    pages++;
    bytes += page->body.size();
    listed += doc["containers"].size();
    if (!doc.contains("next")) break;
    after = doc["next"].get<std::string>();
  }
  std::printf("after listing all %zu containers (%zu pages, %zu bytes): VmHWM %s, VmRSS %s\n",
              listed, pages, bytes, ProcStatusField(pid, "VmHWM").c_str(),
              ProcStatusField(pid, "VmRSS").c_str());
  std::printf("store file: %s bytes\n",
              std::to_string(std::filesystem::file_size(serve.data_dir() + "/tessera.db")).c_str());
}

void RunVersusPodman(int runs) {
  const Podman& podman = Podman::Get();
  if (!podman.ready()) {
    std::fprintf(stderr, "podman not ready: %s\n", podman.setup_error().c_str());
    std::exit(1);
  }
  std::string kind = UniqueTestKind("gpu");
  TempDir dir;
  std::string root = MaterializeHost("hgx-h100-dgx");
  ServeProcess serve(dir.path(), {"--root", root, "--cdi-kind", kind, "--instance", "bench"});
  if (!serve.Start()) std::exit(1);
  auto gpus = CallJson(*serve.Connect(serve.admin_token()), "GET", "/v1/gpus");
  std::string device = gpus["gpus"][0]["cdi_device"];
  std::string tessera = TesseraBinary();
  std::string token_file = serve.data_dir() + "/admin.token";
  std::string server = "http://127.0.0.1:" + std::to_string(serve.port());
  // The same container both ways: runc, one GPU through CDI, `true`.
  auto timings =
      bench::TimeProcessesInterleaved({{"/usr/bin/podman", "run", "--rm", "--runtime=runc",
                                        "--device=" + device, podman.image(), "true"},
                                       {tessera, "run", "--server", server, "--token-file",
                                        token_file, "--gpus", "1", podman.image(), "true"}},
                                      runs, 2);
  const auto& bare = timings[0];
  const auto& through = timings[1];
  std::printf("== one container with 1 GPU (runc, CDI %s), %d runs each\n", device.c_str(), runs);
  std::printf("%s\n", bench::FormatTimings("podman run", bare).c_str());
  std::printf("%s\n", bench::FormatTimings("tessera run", through).c_str());
  std::printf("overhead at p50: %+.1f %%\n", 100.0 * (through.p50_ms - bare.p50_ms) / bare.p50_ms);
  std::printf("load average: %s\n", LoadAverage().c_str());
  // Clean up what both left behind.
  RemoveInstanceContainers("bench");
  RunCommand("podman ps -aq --filter ancestor=" + podman.image() +
             " --filter status=exited | xargs -r podman rm >/dev/null 2>&1");
  RemoveSpecsOfKind(kind);
}

}  // namespace

int main(int argc, char** argv) {
  int duration = 10, connections = 32, threads = 2, runs = 20, containers = 10000;
  bool podman = false, only_podman = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto next = [&] { return i + 1 < argc ? std::stoi(argv[++i]) : 0; };
    if (arg == "--duration")
      duration = next();
    else if (arg == "--connections")
      connections = next();
    else if (arg == "--threads")
      threads = next();
    else if (arg == "--runs")
      runs = next();
    else if (arg == "--containers")
      containers = next();
    else if (arg == "--podman")
      podman = true;
    else if (arg == "--only-podman")
      podman = only_podman = true;
  }
  if (!only_podman) {
    Throughput(duration, connections, threads);
    PeakRss(containers);
  }
  if (podman) RunVersusPodman(runs);
  return 0;
}

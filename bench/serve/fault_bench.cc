// GPU faults through a real tessera-serve with real podman containers on the 8-GPU HGX fixture
// host, the stand-in NVML (events and fault state) and the stand-in nvidia-smi. Printed:
//  1. event -> the faulted GPU's container ended (the event line written to the stand-in's event
//     file until the API shows the container exited: detection, containment and podman's stop),
//     p50/p99/max over --rounds faults, one per round, rotating over the GPUs;
//  2. containers on the other seven GPUs disturbed (each round checks all of them);
//  3. event -> the GPU free again (drained, reset by the stand-in, verified, firmware-checked);
//  4. CPU of tessera-serve over --idle-seconds with no container: watching 8 GPUs against
//     --no-health (the stand-in's event wait polls its file every 20 ms; real NVML blocks in the
//     kernel, so this is an upper bound).
//
// Usage: fault_bench [--rounds N (16)] [--idle-seconds S (20)]
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "serve/serve_process.h"
#include "support/fake_nvml_state.h"
#include "support/figures.h"
#include "support/podman_harness.h"

namespace {

using namespace tessera;
using namespace tessera::testing;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

double Ms(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

// User + system CPU seconds of process `pid` (all threads).
double ProcessCpuSeconds(pid_t pid) {
  const std::string stat = ReadText("/proc/" + std::to_string(pid) + "/stat");
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream fields(stat.substr(close + 2));
  std::string field;
  long ticks = 0;
  for (int i = 3; fields >> field; ++i) {
    if (i == 14 || i == 15) ticks += std::stol(field);
    if (i == 15) break;
  }
  return static_cast<double>(ticks) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

pid_t ServePid(const std::string& data_dir) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string cmdline = ReadText(entry.path().string() + "/cmdline");
    if (cmdline.find("tessera-serve") != std::string::npos &&
        cmdline.find(data_dir) != std::string::npos)
      return static_cast<pid_t>(std::stoi(name));
  }
  return -1;
}

class Bench {
 public:
  Bench() : host_("hgx-h100-dgx"), kind_(UniqueTestKind("gpu")), instance_("fault-bench") {
    gpus_ = WriteGpuRoms(host_.root());
  }
  ~Bench() {
    serve_.reset();
    RemoveInstanceContainers(instance_);
    RemoveSpecsOfKind(kind_);
  }

  bool Start(std::vector<std::string> extra) {
    std::vector<std::string> flags = {"--root",     host_.root(), "--cdi-kind",     kind_,
                                      "--instance", instance_,    "--stop-grace-s", "1",
                                      "--nvml",     FAKE_NVML};
    flags.insert(flags.end(), extra.begin(), extra.end());
    serve_ = std::make_unique<ServeProcess>(dir_.path(), flags);
    std::string log;
    if (!serve_->Start(&log)) {
      std::fprintf(stderr, "tessera-serve did not start:\n%s\n", log.c_str());
      return false;
    }
    admin_ = serve_->Connect(serve_->admin_token());
    return true;
  }
  void Stop() {
    serve_.reset();
    RemoveInstanceContainers(instance_);
  }

  json Get(const std::string& path) {
    for (int i = 0; i < 600; ++i) {
      int status = 0;
      json answer = CallJson(*admin_, "GET", path, "", &status);
      if (status == 200) return answer;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return json::object();
  }

  // A container that ends at once on SIGTERM, so its stop is podman's, not a grace period's.
  std::string Submit() {
    json body = {{"image", Podman::Get().image()},
                 {"tenancy", "bench"},
                 {"gpus", 1},
                 {"command", {"/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 0.1; done"}}};
    int status = 0;
    json answer = CallJson(*admin_, "POST", "/v1/containers", body.dump(), &status);
    return answer.value("id", "");
  }

  // Waits (at most 240 s) until `id` is in one of `states`; returns its GPU.
  std::string WaitState(const std::string& id, const std::set<std::string>& states) {
    for (auto until = Clock::now() + std::chrono::seconds(240); Clock::now() < until;) {
      json container = Get("/v1/containers/" + id);
      if (states.count(container.value("state", "")))
        return container.contains("gpus") && !container["gpus"].empty()
                   ? container["gpus"][0].get<std::string>()
                   : "?";
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return "";
  }

  std::string GpuState(const std::string& pci) { return Get("/v1/gpus/" + pci).value("state", ""); }

  double Cpu() const { return ProcessCpuSeconds(ServePid(serve_->data_dir())); }

  FakeNvmlFaults faults_;
  TempHost host_;
  TempDir dir_;
  std::string kind_, instance_;
  std::vector<std::string> gpus_;
  std::unique_ptr<ServeProcess> serve_;
  std::unique_ptr<client::Connection> admin_;
};

// Figures 1-3.
int MeasureFaults(Bench& bench, int rounds) {
  if (!bench.Start({"--gpu-reset-command", std::string(FAKE_NVIDIA_SMI) + " -r -i {pci}",
                    "--health-poll-interval", "1s", "--max-faults", "1000"}))
    return 1;
  std::map<std::string, std::string> by_gpu;  // GPU -> its running container
  for (size_t i = 0; i < bench.gpus_.size(); ++i) {
    const std::string id = bench.Submit();
    const std::string gpu = bench.WaitState(id, {"running"});
    if (gpu.empty() || gpu == "?") return std::fprintf(stderr, "no start: %s\n", id.c_str()), 1;
    by_gpu[gpu] = id;
  }
  std::vector<double> stopped_ms, free_ms;
  int disturbed = 0;
  for (int round = 0; round < rounds; ++round) {
    const std::string gpu = bench.gpus_[static_cast<size_t>(round) % bench.gpus_.size()];
    const auto t0 = Clock::now();
    bench.faults_.AddEvent(gpu + " 79");
    if (bench.WaitState(by_gpu[gpu], {"exited", "failed"}).empty())
      return std::fprintf(stderr, "round %d: the container did not stop\n", round), 1;
    stopped_ms.push_back(Ms(Clock::now() - t0));
    for (const auto& [other, id] : by_gpu)
      if (other != gpu && bench.Get("/v1/containers/" + id).value("state", "") != "running")
        ++disturbed;
    while (bench.GpuState(gpu) != "free") {
      if (Clock::now() - t0 > std::chrono::seconds(240))
        return std::fprintf(stderr, "round %d: %s not free (%s)\n%s\nresets:\n%s\n", round,
                            gpu.c_str(), bench.Get("/v1/gpus/" + gpu).dump().c_str(),
                            bench.serve_->log().c_str(), bench.faults_.ResetLog().c_str()),
               1;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    free_ms.push_back(Ms(Clock::now() - t0));
    const std::string id = bench.Submit();  // the freed GPU is the only one free
    const std::string placed = bench.WaitState(id, {"running"});
    if (placed != gpu)
      return std::fprintf(stderr, "round %d: placed on %s\n", round, placed.c_str()), 1;
    by_gpu[gpu] = id;
  }
  std::printf("== %d Xid 79 faults, one per round over %zu GPUs, each GPU holding a container\n",
              rounds, bench.gpus_.size());
  std::printf("event -> its container exited: %s\n",
              bench::LatencyPercentiles(stopped_ms, "faults").c_str());
  std::printf("containers on other GPUs disturbed: %d (of %d checks)\n", disturbed,
              rounds * static_cast<int>(bench.gpus_.size() - 1));
  std::printf("event -> GPU free again (drain, reset, verify, firmware check): %s\n",
              bench::LatencyPercentiles(free_ms, "recoveries").c_str());
  const std::string resets = bench.faults_.ResetLog();
  std::printf("resets recorded by the stand-in nvidia-smi: %zu\n",
              static_cast<size_t>(std::count(resets.begin(), resets.end(), '\n')));
  bench.Stop();
  return 0;
}

// Figure 4.
double IdleCpu(Bench& bench, std::vector<std::string> flags, int seconds) {
  if (!bench.Start(std::move(flags))) return -1;
  std::this_thread::sleep_for(std::chrono::seconds(2));  // past start-up
  const double before = bench.Cpu();
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  const double used = bench.Cpu() - before;
  bench.Stop();
  return used;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 16, idle_seconds = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string arg = argv[i];
    if (arg == "--rounds") rounds = std::stoi(argv[i + 1]);
    if (arg == "--idle-seconds") idle_seconds = std::stoi(argv[i + 1]);
  }
  const Podman& podman = Podman::Get();
  if (!podman.ready()) {
    std::fprintf(stderr, "podman not ready: %s\n", podman.setup_error().c_str());
    return 1;
  }
  {
    Bench bench;
    if (int rc = MeasureFaults(bench, rounds); rc != 0) return rc;
  }
  Bench idle;
  const double watching = IdleCpu(idle, {"--health-poll-interval", "5s"}, idle_seconds);
  const double off = IdleCpu(idle, {"--no-health"}, idle_seconds);
  std::printf("== tessera-serve idle for %d s, no container, 8 GPUs\n", idle_seconds);
  std::printf("CPU watching faults: %.3f s (%.2f %% of a core)\n", watching,
              100.0 * watching / idle_seconds);
  std::printf("CPU with --no-health: %.3f s (%.2f %% of a core)\n", off,
              100.0 * off / idle_seconds);
  return 0;
}

// Figures of the telemetry module, printed with their units:
//  1. One collection pass over 8 GPUs with 200 GPU processes (25 per GPU, 50 containers of 4):
//     CPU time of the whole pass, the part inside NVML (the stand-in libnvidia-ml.so.1), and the
//     rest (tessera's: each PID's start time from /proc/<pid>/stat every pass, cgroup reads,
//     merging, attribution, integration) - first pass (every cgroup read) and steady passes
//     (start times only: the same processes keep their containers).
//  2. The node series with 10,000 containers on 8 GPUs: Update + Render time and the series
//     count against --telemetry-max-series.
// Usage: telemetry_bench [PASSES]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "support/fake_nvml_state.h"
#include "support/fixture_host.h"
#include "telemetry/telemetry.h"

namespace {

using namespace tessera;

double Percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0
                        : values[std::min(values.size() - 1,
                                          static_cast<size_t>(p * (values.size() - 1) + 0.5))];
}

std::string Hex64(int n) {
  char text[80];
  std::snprintf(text, sizeof text, "%064x", n + 1);
  return text;
}

void CollectionPass(int passes) {
  testing::TempDir dir;
  testing::FakeNvmlState state("");
  testing::FakeNvmlScenario scenario;
  const uint64_t now = testing::NowMicros();
  std::string text;
  std::vector<telemetry::GpuIdentity> gpus;
  telemetry::Directory directory;
  for (int g = 0; g < 8; ++g) {
    char pci[16];
    std::snprintf(pci, sizeof pci, "0000:%02x:00.0", 0x18 + 0x10 * g);
    gpus.push_back({pci, "", "H100", g, g, "bench"});
    text += std::string("device ") + pci +
            " util=70 mem_util=30 memory_used=42949672960 memory_total=85899345920 "
            "power_mw=500000 temp=60 energy_mj=1000 energy_rate_mw=500000 energy_from_us=" +
            std::to_string(now) + "\n";
  }
  // 200 processes: container c (0..49) has 4 processes on GPU c % 8.
  int pid = 100000;
  for (int c = 0; c < 50; ++c) {
    const std::string& pci = gpus[c % 8].pci_address;
    telemetry::Holder holder;
    holder.key = "c-" + std::to_string(c);
    holder.tenancy = "t" + std::to_string(c % 5);
    holder.runtime_id = Hex64(c);
    holder.gpus = {{pci, 0.125}};
    directory.holders.push_back(holder);
    for (int p = 0; p < 4; ++p, ++pid) {
      text += "process " + pci + " pid=" + std::to_string(pid) + " memory=1073741824\n";
      text += "busy " + pci + " pid=" + std::to_string(pid) + " sm=" + std::to_string(1 + p) +
              " period_ms=167 from_us=" + std::to_string(now - 10'000'000) + "\n";
      const std::string proc = dir.path() + "/proc/" + std::to_string(pid);
      std::filesystem::create_directories(proc);
      std::ofstream(proc + "/stat")
          << pid << " (job) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 1 0 0\n";
      std::ofstream(proc + "/cgroup")
          << "0::/machine.slice/libpod-" << holder.runtime_id << ".scope/container\n";
    }
  }
  scenario.Write(text);
  ::unsetenv("TESSERA_FAKE_NVML_SERVED");  // the served log would be NVML time of our making

  telemetry::NvmlSourceOptions options;
  options.library = FAKE_NVML;
  options.gpus = gpus;
  auto source = telemetry::OpenNvmlSource(options);
  if (!source) {
    std::fprintf(stderr, "telemetry_bench: %s\n", source.error().message.c_str());
    std::exit(1);
  }
  telemetry::CollectorOptions collector_options;
  collector_options.proc_dir = dir.path() + "/proc";
  telemetry::Collector collector(std::move(*source), collector_options);
  telemetry::Cursors cursors;
  int64_t now_ms = 1000;
  auto pass = collector.Collect(directory, cursors, now_ms);
  const auto first = collector.last_cost();
  size_t attributed = 0;
  for (const auto& holder : pass.holders)
    for (const auto& gpu : holder.gpus)
      attributed += gpu.processes;
  std::vector<double> total, nvml, ours, wall;
  for (int i = 0; i < passes; ++i) {
    // A new driver sample period for every process before each pass, as at NVML's pace.
    std::this_thread::sleep_for(std::chrono::milliseconds(170));
    now_ms += 10000;
    pass = collector.Collect(directory, cursors, now_ms);
    const auto& cost = collector.last_cost();
    total.push_back(cost.cpu_seconds * 1e3);
    nvml.push_back(cost.nvml_seconds * 1e3);
    ours.push_back((cost.cpu_seconds - cost.nvml_seconds) * 1e3);
    wall.push_back(cost.wall_seconds * 1e3);
  }
  std::printf(
      "collection pass, 8 GPUs, 200 processes (%zu attributed to 50 containers), %d passes\n",
      attributed, passes);
  std::printf(
      "  first pass (%zu cgroup reads, %zu stat reads): CPU %.3f ms, in NVML %.3f ms, tessera "
      "%.3f ms\n",
      first.cgroup_reads, first.stat_reads, first.cpu_seconds * 1e3, first.nvml_seconds * 1e3,
      (first.cpu_seconds - first.nvml_seconds) * 1e3);
  std::printf(
      "  steady passes (%zu cgroup reads, %zu stat reads each): CPU excluding NVML p50 %.3f ms, "
      "p90 %.3f ms, max %.3f ms (goal <= 5 ms)\n",
      collector.last_cost().cgroup_reads, collector.last_cost().stat_reads, Percentile(ours, 0.5),
      Percentile(ours, 0.9), Percentile(ours, 1.0));
  std::printf(
      "  steady passes: NVML's own CPU (stand-in) p50 %.3f ms, p90 %.3f ms; whole pass CPU "
      "p50 %.3f ms; wall p50 %.3f ms\n",
      Percentile(nvml, 0.5), Percentile(nvml, 0.9), Percentile(total, 0.5), Percentile(wall, 0.5));
}

void NodeSeries(int rounds) {
  telemetry::PassResult pass;
  telemetry::Directory directory;
  pass.time_ms = 5000;
  for (int g = 0; g < 8; ++g) {
    telemetry::GpuSnapshot gpu;
    char pci[16];
    std::snprintf(pci, sizeof pci, "0000:%02x:00.0", 0x18 + 0x10 * g);
    gpu.reading.identity = {pci,    "GPU-" + std::to_string(g), "NVIDIA H100 80GB HBM3", g, g,
                            "bench"};
    gpu.reading.gpu_percent = 50;
    gpu.reading.memory_used = 1ull << 34;
    gpu.reading.memory_total = 80ull << 30;
    gpu.reading.energy_mj = 123456789;
    gpu.reading.temperature_c = 60;
    gpu.power_watts = 400;
    pass.gpus.push_back(gpu);
  }
  std::map<std::string, telemetry::HolderTotals> totals;
  for (int i = 0; i < 10000; ++i) {
    telemetry::Holder holder;
    holder.key = "c-" + std::to_string(i);
    holder.container = holder.key;
    holder.pod = "pod-" + std::to_string(i);
    holder.namespace_ = "tenant-t" + std::to_string(i % 100);
    holder.tenancy = "t" + std::to_string(i % 100);
    const std::string& pci = pass.gpus[i % 8].reading.identity.pci_address;
    holder.gpus = {{pci, 0.01}};
    directory.holders.push_back(holder);
    pass.holders.push_back({static_cast<size_t>(i),
                            {{pci, 1, static_cast<uint64_t>(i % 997) << 20, (i % 13) * 0.5, {}}},
                            {}});
    totals[holder.key] = {{i * 0.5, i * 0.25, i * 3.0}};
  }
  for (size_t cap : {size_t{10000}, size_t{2000}}) {
    telemetry::NodeMetrics metrics({"bench", cap, 10000});
    std::vector<double> times;
    size_t bytes = 0;
    for (int r = 0; r < rounds; ++r) {
      const auto start = std::chrono::steady_clock::now();
      metrics.Update(pass, directory);
      std::string text = metrics.Render(totals, pass.time_ms);
      times.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count());
      bytes = text.size();
    }
    std::printf(
        "node series, 10,000 containers on 8 GPUs, --telemetry-max-series %zu: "
        "update+render p50 %.2f ms, max %.2f ms; %zu container series (cap %zu), %zu KiB\n",
        cap, Percentile(times, 0.5), Percentile(times, 1.0), metrics.last_holder_series(), cap,
        bytes / 1024);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int passes = argc > 1 ? std::atoi(argv[1]) : 100;
  CollectionPass(passes);
  NodeSeries(20);
  return 0;
}

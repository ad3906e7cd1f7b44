// The node endpoint's series: a golden exposition for a fixed pass (dcgm-exporter's names and
// labels, tessera_* for the rest, MIG instances without GPU_UTIL), the cap with 10,000
// containers (overflow summed into container="_other", totals preserved), and series of ended
// containers leaving after one interval.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "support/file_text.h"
#include "telemetry/telemetry.h"

namespace tessera::telemetry {
namespace {

using tessera::testing::ReadText;

constexpr uint64_t kMiB = 1ull << 20;

GpuSnapshot Snapshot(const std::string& pci, int index, bool mig) {
  GpuSnapshot gpu;
  gpu.reading.identity = {
      pci,     "GPU-" + std::to_string(index) + "-uuid", "NVIDIA H100 80GB HBM3", index, index,
      "node-1"};
  gpu.reading.mig = mig;
  if (!mig) {
    gpu.reading.gpu_percent = 87;
    gpu.reading.memory_percent = 41;
  }
  gpu.reading.memory_used = 30000 * kMiB;
  gpu.reading.memory_total = 81559 * kMiB;
  gpu.reading.power_mw = 412345;
  gpu.reading.energy_mj = 123456789;
  gpu.reading.temperature_c = 61;
  gpu.power_watts = 412.345;
  return gpu;
}

struct Fixture {
  Directory dir;
  PassResult pass;
  std::map<std::string, HolderTotals> totals;
};

Fixture Golden() {
  Fixture f;
  Holder a;
  a.key = "c-0000000000000001";
  a.tenancy = "team-a";
  a.pod = "train-0";
  a.namespace_ = "tenant-team-a";
  a.container = "main";
  a.gpus = {{"0000:18:00.0", 1.0}};
  Holder b = a;
  b.key = "c-0000000000000002";
  b.tenancy = "team-b";
  b.pod = "infer-\"x\"";  // escaped in the label value
  b.namespace_ = "tenant-team-b";
  b.mode = "mig";
  b.gpus = {{"0000:2a:00.0", 1.0 / 7}};
  f.dir.holders = {a, b};
  f.pass.time_ms = 1000;
  f.pass.gpus.push_back(Snapshot("0000:18:00.0", 0, false));
  f.pass.gpus.back().reading.xids = {79};
  f.pass.gpus.back().unattributed_processes = 1;
  f.pass.gpus.back().unattributed_memory = 512 * kMiB;
  f.pass.gpus.back().unattributed_sm_percent = 5;
  // Readings bounded before metering: counted per GPU, by kind.
  f.pass.gpus.back().clamps.duplicate_samples = 3;
  f.pass.gpus.back().clamps.energy_refused = 1;
  GpuSnapshot mig = Snapshot("0000:2a:00.0", 1, true);
  MigInstanceReading instance;
  instance.gpu_instance_id = 7;
  instance.profile = "1g.10gb";
  instance.memory_used = 4096 * kMiB;
  instance.memory_total = 9856 * kMiB;
  instance.sm_percent = 62.5;
  mig.reading.mig_instances = {instance};
  f.pass.gpus.push_back(mig);
  GpuSnapshot lost = Snapshot("0000:3a:00.0", 2, false);
  lost.reading.lost = true;
  f.pass.gpus.push_back(lost);
  f.pass.holders.push_back({0, {{"0000:18:00.0", 2, 20 * 1024 * kMiB, 82, {}}}, {}});
  f.pass.holders.push_back({1, {{"0000:2a:00.0", 1, 4096 * kMiB, 8.93, {}}}, {}});
  f.totals["c-0000000000000001"] = {{3600.5, 72000, 1.5e6}};
  f.totals["c-0000000000000002"] = {{12.25, 48, 9000}};
  return f;
}

TEST(NodeMetrics, GoldenExposition) {
  Fixture f = Golden();
  NodeMetrics metrics({"node-1", 10000, 10000});
  metrics.Update(f.pass, f.dir);
  const std::string text = metrics.Render(f.totals, 1000);
  const std::string golden_path =
      std::string(TESSERA_SOURCE_DIR) + "/tests/telemetry/golden/node_metrics.prom";
  if (std::getenv("TESSERA_UPDATE_GOLDEN")) std::ofstream(golden_path) << text;
  EXPECT_EQ(text, ReadText(golden_path)) << text;
  // What matters for dashboards, spelled out: no GPU_UTIL for the MIG GPU or its container.
  EXPECT_EQ(text.find("DCGM_FI_DEV_GPU_UTIL{gpu=\"1\""), std::string::npos);
  EXPECT_NE(text.find("DCGM_FI_PROF_SM_ACTIVE{gpu=\"1\""), std::string::npos);
  EXPECT_EQ(metrics.last_holder_series(), 3u + 4u + 3u + 3u);
}

TEST(NodeMetrics, TenThousandContainersStayWithinTheCapAndSumIntoOther) {
  Directory dir;
  PassResult pass;
  pass.time_ms = 5000;
  std::map<std::string, HolderTotals> totals;
  for (int g = 0; g < 8; ++g) {
    char pci[16];
    std::snprintf(pci, sizeof pci, "0000:%02x:00.0", 0x10 + g);
    pass.gpus.push_back(Snapshot(pci, g, false));
  }
  double sm_seconds = 0;
  uint64_t memory = 0;
  for (int i = 0; i < 10000; ++i) {
    Holder h;
    h.key = "c-" + std::to_string(i);
    h.container = h.key;
    h.tenancy = "t" + std::to_string(i % 50);
    const std::string& pci = pass.gpus[i % 8].reading.identity.pci_address;
    h.gpus = {{pci, 0.01}};
    dir.holders.push_back(h);
    pass.holders.push_back(
        {static_cast<size_t>(i), {{pci, 1, static_cast<uint64_t>(i) * kMiB, 0.01, {}}}, {}});
    totals[h.key] = {{1.0, 2.0, 3.0}};
    sm_seconds += 1.0;
    memory += static_cast<uint64_t>(i) * kMiB;
  }
  NodeMetrics metrics({"node-1", 2000, 10000});
  metrics.Update(pass, dir);
  const std::string text = metrics.Render(totals, 5000);
  EXPECT_LE(metrics.last_holder_series(), 2000u);
  EXPECT_GT(metrics.last_holder_series(), 1800u);
  // Every container counted exactly once: shown or in _other.
  std::set<std::string> shown;
  std::regex counter(
      R"re(tessera_container_sm_seconds_total\{[^}]*container="([^"]+)"[^}]*\} (\S+))re");
  double total = 0;
  for (std::sregex_iterator it(text.begin(), text.end(), counter), end; it != end; ++it) {
    shown.insert((*it)[1]);
    total += std::stod((*it)[2]);
  }
  EXPECT_TRUE(shown.count("_other"));
  EXPECT_DOUBLE_EQ(total, sm_seconds);
  std::regex fb(R"re(DCGM_FI_DEV_FB_USED\{[^}]*container="[^"]+"[^}]*\} (\S+))re");
  double fb_mib = 0;
  for (std::sregex_iterator it(text.begin(), text.end(), fb), end; it != end; ++it)
    fb_mib += std::stod((*it)[1]);
  EXPECT_DOUBLE_EQ(fb_mib, static_cast<double>(memory / kMiB));
  // The most active (largest memory, same SM) are the ones shown.
  EXPECT_NE(text.find("container=\"c-9999\""), std::string::npos);
  EXPECT_EQ(text.find("container=\"c-0\","), std::string::npos);
  EXPECT_NE(text.find("tessera_telemetry_containers_in_other{Hostname=\"node-1\"}"),
            std::string::npos);
}

TEST(NodeMetrics, AnEndedContainersSeriesLeaveAfterOneInterval) {
  Fixture f = Golden();
  NodeMetrics metrics({"node-1", 10000, 10000});  // linger: one 10 s interval
  metrics.Update(f.pass, f.dir);
  EXPECT_NE(metrics.Render(f.totals, 1000).find("pod=\"infer-"), std::string::npos);
  // Next pass: B has ended (no longer a holder). Its counters stay one interval, its gauges go.
  PassResult next = f.pass;
  next.time_ms = 11000;
  next.holders.pop_back();
  metrics.Update(next, f.dir);
  std::string text = metrics.Render(f.totals, 11000);
  EXPECT_NE(text.find("tessera_container_sm_seconds_total{pod=\"infer-\\\"x\\\"\""),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("tessera_container_gpu_processes{gpu=\"1\""), std::string::npos) << text;
  next.time_ms = 21001;
  metrics.Update(next, f.dir);
  EXPECT_EQ(metrics.Render(f.totals, 21001).find("infer-"), std::string::npos);
}

}  // namespace
}  // namespace tessera::telemetry

// Attribution and integration of one pass, from readings written as NVML would report them:
// processes summed per container, host processes and unknown containers unattributed, SM-seconds
// from the samples newer than the cursor (never twice), memory GiB-seconds over the pass, energy
// split between busy (by SM share) and idle (by allocation), GPM for MIG instances.
#include <gtest/gtest.h>

#include "telemetry/telemetry.h"

namespace tessera::telemetry {
namespace {

constexpr uint64_t kGiB = 1ull << 30;
const std::string kA = std::string(64, 'a');
const std::string kB = std::string(64, 'b');
const std::string kHost = "";  // no container

Holder MakeHolder(const std::string& key, const std::string& tenancy, const std::string& runtime_id,
                  std::map<std::string, double> gpus) {
  Holder holder;
  holder.key = key;
  holder.tenancy = tenancy;
  holder.container = key;
  holder.runtime_id = runtime_id;
  holder.gpus = std::move(gpus);
  return holder;
}

GpuReading Gpu(const std::string& pci) {
  GpuReading reading;
  reading.identity.pci_address = pci;
  reading.identity.uuid = "GPU-" + pci;
  reading.identity.model = "H100";
  return reading;
}

nvml::ProcessMemory Process(uint32_t pid, uint64_t bytes) {
  nvml::ProcessMemory p;
  p.pid = pid;
  p.used_bytes = bytes;
  p.gpu_instance_id = p.compute_instance_id = 0xFFFFFFFFu;
  return p;
}

// Live processes (started at the epoch, long before any sample) in these containers ("": none).
PidContainers Pids(std::initializer_list<std::pair<uint32_t, std::string>> pids) {
  PidContainers out;
  for (const auto& [pid, id] : pids) {
    out[pid].start_ms = 0;
    if (!id.empty()) out[pid].container = CgroupContainer{Runtime::kPodman, id, ""};
  }
  return out;
}

const HolderReading* Find(const PassResult& pass, size_t holder) {
  for (const auto& h : pass.holders)
    if (h.holder == holder) return &h;
  return nullptr;
}

TEST(Integrate, TwoProcessesOfOneContainerAreSummedAndAHostProcessIsNobodys) {
  Directory dir;
  dir.holders.push_back(MakeHolder("c-a", "team-a", kA, {{"0000:18:00.0", 1.0}}));
  GpuReading gpu = Gpu("0000:18:00.0");
  gpu.processes = {Process(100, 2 * kGiB), Process(101, 3 * kGiB), Process(200, 1 * kGiB)};
  gpu.samples = {{100, 2'000'000, 30, 0}, {101, 2'000'000, 20, 0}, {200, 2'000'000, 10, 0}};
  Cursors cursors;
  cursors["0000:18:00.0"] = {1'000'000, 0, 1000};
  auto pass = Integrate({gpu}, Pids({{100, kA}, {101, kA}, {200, kHost}}), dir, cursors, 2000);
  const auto* a = Find(pass, 0);
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->gpus.size(), 1u);
  EXPECT_EQ(a->gpus[0].processes, 2u);
  EXPECT_EQ(a->gpus[0].memory_bytes, 5 * kGiB);
  // Each process with its own figure (what a share's watchdog sums and, with MPS, ends).
  ASSERT_EQ(a->gpus[0].process_list.size(), 2u);
  EXPECT_EQ(a->gpus[0].process_list[0].pid, 100u);
  EXPECT_EQ(a->gpus[0].process_list[0].used_bytes, 2 * kGiB);
  EXPECT_EQ(a->gpus[0].process_list[1].pid, 101u);
  EXPECT_EQ(a->gpus[0].process_list[1].used_bytes, 3 * kGiB);
  EXPECT_DOUBLE_EQ(a->gpus[0].sm_percent, 50);
  // One second covered (the sample at 2.0 s after the cursor's 1.0 s) at 30 % + 20 %.
  EXPECT_DOUBLE_EQ(a->delta.sm_seconds, 0.5);
  EXPECT_DOUBLE_EQ(a->delta.memory_gib_seconds, 5.0);
  ASSERT_EQ(pass.gpus.size(), 1u);
  EXPECT_EQ(pass.gpus[0].unattributed_processes, 1u);
  EXPECT_EQ(pass.gpus[0].unattributed_memory, kGiB);
  EXPECT_DOUBLE_EQ(pass.gpus[0].unattributed_sm_percent, 10);
  EXPECT_DOUBLE_EQ(pass.gpus[0].unattributed.sm_seconds, 0.1);
  EXPECT_EQ(cursors["0000:18:00.0"].sample_us, 2'000'000u);
  EXPECT_EQ(cursors["0000:18:00.0"].sampled_ms, 2000);
}

TEST(Integrate, AnotherTenancysContainerNeverLeaksIntoThisOne) {
  Directory dir;
  dir.holders.push_back(MakeHolder("c-a", "team-a", kA, {{"0000:18:00.0", 1.0}}));
  dir.holders.push_back(MakeHolder("c-b", "team-b", kB, {{"0000:2a:00.0", 1.0}}));
  // B's process runs on A's GPU (as if it had been handed the device): it is still B's.
  GpuReading gpu = Gpu("0000:18:00.0");
  gpu.processes = {Process(100, kGiB), Process(300, 4 * kGiB)};
  gpu.samples = {{100, 2'000'000, 10, 0}, {300, 2'000'000, 90, 0}};
  Cursors cursors;
  cursors["0000:18:00.0"] = {1'000'000, 0, 1000};
  // An unknown container (not in the directory) is nobody's either.
  GpuReading other = Gpu("0000:2a:00.0");
  other.processes = {Process(400, kGiB)};
  cursors["0000:2a:00.0"] = {1'000'000, 0, 1000};
  const std::string unknown(64, 'c');
  auto pass =
      Integrate({gpu, other}, Pids({{100, kA}, {300, kB}, {400, unknown}}), dir, cursors, 2000);
  const auto* a = Find(pass, 0);
  const auto* b = Find(pass, 1);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->gpus[0].memory_bytes, kGiB);
  EXPECT_DOUBLE_EQ(a->delta.sm_seconds, 0.1);
  uint64_t b_on_a = 0;
  for (const auto& g : b->gpus)
    if (g.pci_address == "0000:18:00.0") b_on_a = g.memory_bytes;
  EXPECT_EQ(b_on_a, 4 * kGiB);
  EXPECT_DOUBLE_EQ(b->delta.sm_seconds, 0.9);
  EXPECT_EQ(pass.gpus[1].unattributed_processes, 1u);
  EXPECT_EQ(pass.gpus[1].unattributed_memory, kGiB);
}

TEST(Integrate, SamplesAreCountedOnceAcrossPassesAndARestartedCollector) {
  Directory dir;
  dir.holders.push_back(MakeHolder("c-a", "team-a", kA, {{"0000:18:00.0", 1.0}}));
  Cursors cursors;
  GpuReading gpu = Gpu("0000:18:00.0");
  gpu.processes = {Process(100, 0)};
  // The first pass only sets the cursor.
  gpu.samples = {{100, 1'000'000, 100, 0}};
  auto first = Integrate({gpu}, Pids({{100, kA}}), dir, cursors, 1000);
  EXPECT_DOUBLE_EQ(first.holders.at(0).delta.sm_seconds, 0);
  // The driver returns its buffer since the cursor: one sample per 0.5 s period, some old.
  gpu.samples = {{100, 1'000'000, 100, 0}, {100, 1'500'000, 100, 0}, {100, 2'000'000, 50, 0}};
  Cursors saved = cursors;
  auto second = Integrate({gpu}, Pids({{100, kA}}), dir, cursors, 2000);
  EXPECT_DOUBLE_EQ(second.holders.at(0).delta.sm_seconds, 0.5 * 1.0 + 0.5 * 0.5);
  // A collector restarted from the saved cursor (the pass above was lost with it) counts the
  // same samples again, exactly once; from the new cursor, none of them.
  auto again = Integrate({gpu}, Pids({{100, kA}}), dir, saved, 2000);
  EXPECT_DOUBLE_EQ(again.holders.at(0).delta.sm_seconds, 0.75);
  auto third = Integrate({gpu}, Pids({{100, kA}}), dir, cursors, 3000);
  EXPECT_DOUBLE_EQ(third.holders.at(0).delta.sm_seconds, 0);
}

TEST(Integrate, AGapIsNotGivenToOneSampleButMemoryHeldThroughItIsCharged) {
  Directory dir;
  dir.holders.push_back(MakeHolder("c-a", "team-a", kA, {{"0000:18:00.0", 1.0}}));
  Cursors cursors;
  cursors["0000:18:00.0"] = {1'000'000, 0, 1000};
  GpuReading gpu = Gpu("0000:18:00.0");
  gpu.processes = {Process(100, kGiB)};
  gpu.samples = {{100, 601'000'000, 100, 0}};
  IntegrationOptions options;
  options.max_gap = std::chrono::seconds(20);
  auto pass = Integrate({gpu}, Pids({{100, kA}}), dir, cursors, 601000, options);
  // One sample is one of the driver's periods (1 s at most), not the ten minutes before it.
  EXPECT_DOUBLE_EQ(pass.holders.at(0).delta.sm_seconds, 1);
  // The process lived through the gap (it started long before) and holds its memory now.
  EXPECT_DOUBLE_EQ(pass.holders.at(0).delta.memory_gib_seconds, 600);
}

TEST(Integrate, EnergyBusyBySmShareIdleByAllocation) {
  Directory dir;
  // A MIG-like split of one GPU: A holds 3/7, B holds 2/7, the rest is free.
  dir.holders.push_back(MakeHolder("c-a", "team-a", kA, {{"0000:18:00.0", 3.0 / 7}}));
  dir.holders.push_back(MakeHolder("c-b", "team-b", kB, {{"0000:18:00.0", 2.0 / 7}}));
  Cursors cursors;
  cursors["0000:18:00.0"] = {1'000'000, 100'000, 1000};
  GpuReading gpu = Gpu("0000:18:00.0");
  gpu.processes = {Process(100, kGiB)};
  for (uint64_t s = 2; s <= 11; ++s)  // A's SMs 40 % of the 10 s pass, one sample a second
    gpu.samples.push_back({100, s * 1'000'000, 40, 0});
  gpu.energy_mj = 100'000 + 3'500'000;  // 3500 J over 10 s
  auto pass = Integrate({gpu}, Pids({{100, kA}}), dir, cursors, 11000);
  const auto* a = Find(pass, 0);
  const auto* b = Find(pass, 1);
  ASSERT_TRUE(a && b);
  const double busy = 3500 * 0.4, idle = 3500 * 0.6;
  EXPECT_NEAR(a->delta.energy_joules, busy + idle * 3 / 7, 1e-9);
  EXPECT_NEAR(b->delta.energy_joules, idle * 2 / 7, 1e-9);
  EXPECT_NEAR(pass.gpus[0].unattributed.energy_joules, idle * 2 / 7, 1e-9);
  EXPECT_NEAR(pass.gpus[0].power_watts, 350, 1e-9);
  EXPECT_EQ(cursors["0000:18:00.0"].energy_mj, 3'600'000u);
  // B holds a GPU and runs nothing: it is listed, with its idle share.
  EXPECT_EQ(b->gpus.at(0).processes, 0u);
  // A counter that went back (driver reloaded) is a new baseline, not a negative delta.
  gpu.energy_mj = 5'000;
  gpu.samples.clear();
  auto reset = Integrate({gpu}, Pids({{100, kA}}), dir, cursors, 21000);
  EXPECT_DOUBLE_EQ(Find(reset, 0)->delta.energy_joules, 0);
  EXPECT_EQ(cursors["0000:18:00.0"].energy_mj, 5'000u);
  EXPECT_EQ(reset.gpus[0].clamps.energy_refused, 1u);
  EXPECT_EQ(reset.gpus[0].refused.size(), 1u);
}

TEST(Integrate, MigInstancesUseGpmAndNoGpuUtilization) {
  Directory dir;
  Holder a = MakeHolder("c-a", "team-a", kA, {{"0000:18:00.0", 1.0 / 7}});
  a.mode = "mig";
  dir.holders.push_back(a);
  Cursors cursors;
  cursors["0000:18:00.0"] = {0, 0, 1000};
  GpuReading gpu = Gpu("0000:18:00.0");
  gpu.mig = true;
  nvml::ProcessMemory p = Process(100, 2 * kGiB);
  p.gpu_instance_id = 7;
  p.compute_instance_id = 0;
  gpu.processes = {p};
  MigInstanceReading busy;
  busy.gpu_instance_id = 7;
  busy.share = 1.0 / 7;
  busy.sm_percent = 70;
  MigInstanceReading idle;
  idle.gpu_instance_id = 8;
  idle.share = 1.0 / 7;
  idle.sm_percent = 0;
  gpu.mig_instances = {busy, idle};
  auto pass = Integrate({gpu}, Pids({{100, kA}}), dir, cursors, 11000);
  const auto* holder = Find(pass, 0);
  ASSERT_NE(holder, nullptr);
  // 70 % of a 1/7 instance for 10 s: 1 SM-second in GPU units.
  EXPECT_NEAR(holder->delta.sm_seconds, 1.0, 1e-9);
  EXPECT_NEAR(holder->gpus[0].sm_percent, 10, 1e-9);
  EXPECT_FALSE(pass.gpus[0].reading.gpu_percent);
}

TEST(Integrate, ShortProcessesFromAccountingCountAsNobodysOnce) {
  Directory dir;
  dir.holders.push_back(MakeHolder("c-a", "team-a", kA, {{"0000:18:00.0", 1.0}}));
  Cursors cursors;
  cursors["0000:18:00.0"] = {0, 0, 10000};
  GpuReading gpu = Gpu("0000:18:00.0");
  nvml::AccountingStats ended;
  ended.pid = 555;
  ended.gpu_percent = 50;
  ended.max_memory_bytes = kGiB;
  ended.time_ms = 2000;
  ended.start_us = 12'000'000;  // ended at 14 s, inside (10 s, 20 s]
  gpu.ended = {ended};
  // Its PID is a live process of A's container now (reused): the record is still nobody's.
  auto pass = Integrate({gpu}, Pids({{555, kA}}), dir, cursors, 20000);
  EXPECT_EQ(Find(pass, 0)->delta, Usage{});
  EXPECT_DOUBLE_EQ(pass.gpus[0].unattributed.sm_seconds, 1.0);
  EXPECT_DOUBLE_EQ(pass.gpus[0].unattributed.memory_gib_seconds, 2.0);
  // The next pass does not count it again.
  auto next = Integrate({gpu}, Pids({{555, kHost}}), dir, cursors, 30000);
  EXPECT_DOUBLE_EQ(next.gpus[0].unattributed.sm_seconds, 0);
}

TEST(Integrate, ALostGpuIsNotIntegratedAndKeepsItsCursor) {
  Directory dir;
  Cursors cursors;
  cursors["0000:18:00.0"] = {5, 6, 7};
  GpuReading gpu = Gpu("0000:18:00.0");
  gpu.lost = true;
  auto pass = Integrate({gpu}, {}, dir, cursors, 20000);
  EXPECT_TRUE(pass.gpus[0].reading.lost);
  EXPECT_EQ(cursors["0000:18:00.0"], (GpuCursor{5, 6, 7}));
}

TEST(Integrate, KubernetesPodWhoseContainerIdIsNotKnownYet) {
  Directory dir;
  Holder pod;
  pod.key = "lease-1";
  pod.tenancy = "team-a";
  pod.pod_uid = "0d9f2c3b-7e4a-4b1c-9d8e-6f5a4b3c2d1e";
  pod.gpus = {{"0000:18:00.0", 1.0}};
  dir.holders.push_back(pod);
  Cursors cursors;
  GpuReading gpu = Gpu("0000:18:00.0");
  gpu.processes = {Process(100, kGiB)};
  PidContainers pids;
  pids[100] = {CgroupContainer{Runtime::kContainerd, kA, pod.pod_uid}, 0};
  auto pass = Integrate({gpu}, pids, dir, cursors, 1000);
  ASSERT_NE(Find(pass, 0), nullptr);
  EXPECT_EQ(Find(pass, 0)->gpus[0].memory_bytes, kGiB);
  // Once its ID is known, a different container of that Pod is not it.
  dir.holders[0].runtime_id = kB;
  auto later = Integrate({gpu}, pids, dir, cursors, 2000);
  EXPECT_EQ(later.gpus[0].unattributed_processes, 1u);
}

// ---- Readings you can defend: PID reuse, bounds, sample periods, gaps ----

TEST(Integrate, AReusedPidsEarlierSamplesAndAGonePidsSamplesAreNobodys) {
  Directory dir;
  dir.holders.push_back(MakeHolder("c-a", "team-a", kA, {{"0000:18:00.0", 1.0}}));
  dir.holders.push_back(MakeHolder("c-b", "team-b", kB, {{"0000:2a:00.0", 1.0}}));
  Cursors cursors;
  cursors["0000:18:00.0"] = {10'000'000, 0, 10'000};
  GpuReading gpu = Gpu("0000:18:00.0");
  gpu.sample_period_us = 1'000'000;
  // PID 100 was B's process until about 13 s; the PID now names A's process, started at 15 s.
  // PID 200 was sampled and has ended since: gone.
  gpu.processes = {Process(100, kGiB)};
  for (uint64_t s = 11; s <= 20; ++s)
    gpu.samples.push_back({100, s * 1'000'000, 50, 0});
  gpu.samples.push_back({200, 12'000'000, 30, 0});
  PidContainers pids;
  pids[100] = {CgroupContainer{Runtime::kPodman, kA, ""}, 15'000};
  // 200 is not in the map: the collector found it gone.
  auto pass = Integrate({gpu}, pids, dir, cursors, 20'000);
  const auto* a = Find(pass, 0);
  ASSERT_NE(a, nullptr);
  // A: the samples after its process started (16..20 s), five periods at 50 %.
  EXPECT_DOUBLE_EQ(a->delta.sm_seconds, 2.5);
  // Memory from its start, not from the previous pass.
  EXPECT_DOUBLE_EQ(a->delta.memory_gib_seconds, 5.0);
  // B is billed nothing on a GPU it does not hold; the rest is unattributed.
  EXPECT_EQ(Find(pass, 1), nullptr);
  EXPECT_DOUBLE_EQ(pass.gpus[0].unattributed.sm_seconds, 5 * 0.5 + 0.3);
  EXPECT_EQ(pass.gpus[0].clamps.stale_samples, 6u);
}

TEST(Integrate, HostileReadingsAreBoundedAndEachBoundIsCounted) {
  Directory dir;
  dir.holders.push_back(MakeHolder("c-a", "team-a", kA, {{"0000:18:00.0", 1.0}}));
  Cursors cursors;
  cursors["0000:18:00.0"] = {1'000'000, 0, 1000};
  GpuReading gpu = Gpu("0000:18:00.0");
  gpu.memory_total = 80 * kGiB;
  gpu.sample_period_us = 1'000'000;
  // 2^62 bytes for one process; another's 40 GiB brings the sum over the board too.
  gpu.processes = {Process(100, 1ull << 62), Process(101, 40 * kGiB)};
  // Twenty processes at 100 % in one period (2,000 % of one GPU), and the same sample 20 times.
  for (uint32_t pid = 300; pid < 320; ++pid)
    gpu.samples.push_back({pid, 2'000'000, 100, 0});
  for (int i = 0; i < 20; ++i)
    gpu.samples.push_back({100, 2'000'000, 100, 0});
  PidContainers pids = Pids({{100, kA}, {101, kA}});
  for (uint32_t pid = 300; pid < 320; ++pid)
    pids[pid] = {CgroupContainer{Runtime::kPodman, kA, ""}, 0};
  auto pass = Integrate({gpu}, pids, dir, cursors, 2000);
  const auto* a = Find(pass, 0);
  ASSERT_NE(a, nullptr);
  // One period of one second, the whole GPU at most: 1 SM-second, whoever claims what.
  EXPECT_NEAR(a->delta.sm_seconds, 1.0, 1e-9);
  EXPECT_LE(a->gpus[0].sm_percent, 100.0);
  EXPECT_LE(pass.gpus[0].sm_percent, 100.0);
  // The board's memory at most, for the one second since the cursor.
  EXPECT_LE(a->gpus[0].memory_bytes, 80 * kGiB);
  EXPECT_GT(a->gpus[0].memory_bytes, 79 * kGiB);
  EXPECT_NEAR(a->delta.memory_gib_seconds, 80.0, 1e-6);
  const Clamps& c = pass.gpus[0].clamps;
  EXPECT_EQ(c.duplicate_samples, 19u);
  EXPECT_EQ(c.sm_over_gpu, 1u);
  EXPECT_EQ(c.memory_over_total, 2u);  // the one process, then the sum
}

TEST(Integrate, EnergyIsBoundedByThePowerLimitOverTheInterval) {
  Directory dir;
  dir.holders.push_back(MakeHolder("c-a", "team-a", kA, {{"0000:18:00.0", 1.0}}));
  Cursors cursors;
  cursors["0000:18:00.0"] = {0, 1'000'000, 1000};
  GpuReading gpu = Gpu("0000:18:00.0");
  gpu.power_limit_mw = 700'000;
  // 7 s at 700 W is 4,900 J at most. A reading 5 % over (sensor, timing) is cut to the bound.
  gpu.energy_mj = 1'000'000 + 5'145'000;
  auto over = Integrate({gpu}, Pids({}), dir, cursors, 8000);
  EXPECT_NEAR(Find(over, 0)->delta.energy_joules, 4900, 1e-6);
  EXPECT_EQ(over.gpus[0].clamps.energy_over_limit, 1u);
  // A glitch: 1 kWh in the next 7 s. Refused, logged, nothing charged; the baseline moves on.
  gpu.energy_mj = *gpu.energy_mj + 3'600'000'000ull;
  auto glitch = Integrate({gpu}, Pids({}), dir, cursors, 15000);
  EXPECT_DOUBLE_EQ(Find(glitch, 0)->delta.energy_joules, 0);
  EXPECT_DOUBLE_EQ(glitch.gpus[0].unattributed.energy_joules, 0);
  EXPECT_EQ(glitch.gpus[0].clamps.energy_refused, 1u);
  ASSERT_EQ(glitch.gpus[0].refused.size(), 1u);
  EXPECT_NE(glitch.gpus[0].refused[0].find("limit 700 W"), std::string::npos)
      << glitch.gpus[0].refused[0];
  // After it, readings within the bound are charged again.
  gpu.energy_mj = *gpu.energy_mj + 2'100'000;  // 300 W for 7 s
  auto next = Integrate({gpu}, Pids({}), dir, cursors, 22000);
  EXPECT_NEAR(Find(next, 0)->delta.energy_joules, 2100, 1e-6);
}

TEST(Integrate, EnergyOfAStalledPassGoesToHoldersForThePartTheyHeldTheGpu) {
  // The pass stalled 10 s; B took the GPU 2 s before the next pass (A's container had ended,
  // so A is no longer in the directory).
  Directory dir;
  Holder b = MakeHolder("c-b", "team-b", kB, {{"0000:18:00.0", 1.0}});
  b.since_ms = 9000;
  dir.holders.push_back(b);
  Cursors cursors;
  cursors["0000:18:00.0"] = {0, 1'000'000, 1000};
  GpuReading gpu = Gpu("0000:18:00.0");
  gpu.power_limit_mw = 700'000;
  gpu.energy_mj = 1'000'000 + 1'000'000;  // 1,000 J over the 10 s, all idle
  auto pass = Integrate({gpu}, Pids({}), dir, cursors, 11000);
  EXPECT_NEAR(Find(pass, 0)->delta.energy_joules, 200, 1e-9);
  EXPECT_NEAR(pass.gpus[0].unattributed.energy_joules, 800, 1e-9);
}

TEST(Integrate, MemoryAcrossAStallOrARestartIsChargedForTheTimeItWasHeld) {
  Directory dir;
  dir.holders.push_back(MakeHolder("c-a", "team-a", kA, {{"0000:18:00.0", 1.0}}));
  IntegrationOptions options;
  options.max_gap = std::chrono::milliseconds(200);  // twice a 100 ms interval
  Cursors cursors;
  cursors["0000:18:00.0"] = {0, 0, 1000};
  GpuReading gpu = Gpu("0000:18:00.0");
  // 3.2 s without a pass; the first process ran through it, the second started 1.2 s ago.
  gpu.processes = {Process(100, 2 * kGiB), Process(101, kGiB)};
  PidContainers pids = Pids({{100, kA}, {101, kA}});
  pids[101].start_ms = 3000;
  auto pass = Integrate({gpu}, pids, dir, cursors, 4200, options);
  EXPECT_NEAR(Find(pass, 0)->delta.memory_gib_seconds, 2 * 3.2 + 1 * 1.2, 1e-9);
  // Memory of a process nobody can date (gone by now) covers at most max_gap.
  pids.erase(101);
  auto next = Integrate({gpu}, pids, dir, cursors, 5200, options);
  EXPECT_NEAR(next.gpus[0].unattributed.memory_gib_seconds, 0.2, 1e-9);
}

TEST(Integrate, ABurstyProcessIsBilledForItsBurstsNotItsIdleGaps) {
  // Alone on its GPU, busy 0.2 s of every 1.5 s; the driver samples every 100 ms and lists the
  // process only in the periods it was busy (two at 100 % per burst). 20 bursts over 30 s.
  Directory dir;
  dir.holders.push_back(MakeHolder("c-a", "team-a", kA, {{"0000:18:00.0", 1.0}}));
  Cursors cursors;
  cursors["0000:18:00.0"] = {0, 0, 1000};
  GpuReading gpu = Gpu("0000:18:00.0");
  gpu.sample_period_us = 100'000;
  gpu.processes = {Process(100, 0)};
  double billed = 0;
  int64_t now_ms = 1000;
  for (int pass = 0; pass < 3; ++pass) {  // 10 s passes
    gpu.samples.clear();
    for (int burst = 0; burst < 7; ++burst) {
      const uint64_t at = static_cast<uint64_t>(now_ms) * 1000 + burst * 1'500'000 + 100'000;
      gpu.samples.push_back({100, at, 100, 0});
      gpu.samples.push_back({100, at + 100'000, 100, 0});
    }
    now_ms += 10'500;
    auto result = Integrate({gpu}, Pids({{100, kA}}), dir, cursors, now_ms);
    billed += Find(result, 0)->delta.sm_seconds;
  }
  EXPECT_NEAR(billed, 21 * 0.2, 1e-9);
  // Without the driver's period the closest spacing of its samples stands for it.
  gpu.sample_period_us = 0;
  gpu.samples.clear();
  const uint64_t at = static_cast<uint64_t>(now_ms) * 1000 + 100'000;
  gpu.samples = {{100, at, 100, 0}, {100, at + 100'000, 100, 0}};
  now_ms += 10'000;
  auto fallback = Integrate({gpu}, Pids({{100, kA}}), dir, cursors, now_ms);
  EXPECT_NEAR(Find(fallback, 0)->delta.sm_seconds, 0.2, 1e-9);
}

TEST(Integrate, SamplesFromTheFutureWaitForTheirPass) {
  Directory dir;
  dir.holders.push_back(MakeHolder("c-a", "team-a", kA, {{"0000:18:00.0", 1.0}}));
  Cursors cursors;
  cursors["0000:18:00.0"] = {1'000'000, 0, 1000};
  GpuReading gpu = Gpu("0000:18:00.0");
  gpu.sample_period_us = 1'000'000;
  gpu.samples = {{100, 2'000'000, 100, 0}, {100, 3'000'000, 100, 0}};
  auto pass = Integrate({gpu}, Pids({{100, kA}}), dir, cursors, 2000);
  EXPECT_DOUBLE_EQ(Find(pass, 0)->delta.sm_seconds, 1);
  EXPECT_EQ(cursors["0000:18:00.0"].sample_us, 2'000'000u);
  auto later = Integrate({gpu}, Pids({{100, kA}}), dir, cursors, 3000);
  EXPECT_DOUBLE_EQ(Find(later, 0)->delta.sm_seconds, 1);
}

TEST(MergeProcessLists, OneEntryPerPidWithItsLargerFigure) {
  nvml::ProcessMemory compute = Process(10, 100);
  nvml::ProcessMemory mps = Process(10, 300);
  mps.mps = true;
  nvml::ProcessMemory unknown = Process(11, 0);
  unknown.used_bytes.reset();
  nvml::ProcessMemory zero = Process(0, 5);
  auto merged = MergeProcessLists({{compute, unknown, zero}, {mps, Process(11, 7)}});
  ASSERT_EQ(merged.size(), 2u);
  EXPECT_EQ(merged[0].pid, 10u);
  EXPECT_EQ(merged[0].used_bytes, 300u);
  EXPECT_TRUE(merged[0].mps);
  EXPECT_EQ(merged[1].used_bytes, 7u);
  EXPECT_EQ(MergeProcessLists({{Process(1, 1), Process(2, 1), Process(3, 1)}}, 2).size(), 2u);
}

}  // namespace
}  // namespace tessera::telemetry

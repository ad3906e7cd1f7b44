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

PidContainers Pids(std::initializer_list<std::pair<uint32_t, std::string>> pids) {
  PidContainers out;
  for (const auto& [pid, id] : pids) {
    if (id.empty()) {
      out[pid] = std::nullopt;
    } else {
      out[pid] = CgroupContainer{Runtime::kPodman, id, ""};
    }
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
  auto pass = Integrate({gpu, other}, Pids({{100, kA}, {300, kB}, {400, unknown}}), dir, cursors,
                        2000);
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

TEST(Integrate, AGapLongerThanTheLimitIsNotGivenToOneSample) {
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
  EXPECT_DOUBLE_EQ(pass.holders.at(0).delta.sm_seconds, 20);
  EXPECT_DOUBLE_EQ(pass.holders.at(0).delta.memory_gib_seconds, 20);
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
  gpu.samples = {{100, 11'000'000, 40, 0}};  // A's SMs 40 % of the 10 s pass
  gpu.energy_mj = 100'000 + 3'500'000;       // 3500 J over 10 s
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
  auto pass = Integrate({gpu}, Pids({{555, kHost}}), dir, cursors, 20000);
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
  pids[100] = CgroupContainer{Runtime::kContainerd, kA, pod.pod_uid};
  auto pass = Integrate({gpu}, pids, dir, cursors, 1000);
  ASSERT_NE(Find(pass, 0), nullptr);
  EXPECT_EQ(Find(pass, 0)->gpus[0].memory_bytes, kGiB);
  // Once its ID is known, a different container of that Pod is not it.
  dir.holders[0].runtime_id = kB;
  auto later = Integrate({gpu}, pids, dir, cursors, 2000);
  EXPECT_EQ(later.gpus[0].unattributed_processes, 1u);
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

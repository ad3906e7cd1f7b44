// The collector's passes against the stand-in libnvidia-ml.so.1 and a fixture /proc tree
// (<pid>/stat and <pid>/cgroup, rewritten between passes as the kernel would): a PID that NVML
// keeps listing while the process behind it changed is the new process's from its start on and
// never the old container's; a PID that is gone is nobody's; a FIFO in the tree never stalls a
// pass; memory and energy across a restarted collector are charged for the time between the
// GPU's reads, bounded by the power limit; hostile readings (a sample listed thrice, processes
// claiming 300 % of a GPU, 2^62 bytes, an energy counter that jumps or goes back) are bounded,
// counted, and the energy glitches charge nobody.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "support/fake_nvml_state.h"
#include "telemetry/telemetry.h"

namespace tessera::telemetry {
namespace {

using testing::FakeNvmlScenario;
using testing::FakeNvmlState;

constexpr char kPci[] = "0000:18:00.0";
const std::string kA = std::string(64, 'a');
const std::string kB = std::string(64, 'b');

int64_t BootMs() {
  timespec real{}, boot{};
  ::clock_gettime(CLOCK_REALTIME, &real);
  ::clock_gettime(CLOCK_BOOTTIME, &boot);
  return (real.tv_sec - boot.tv_sec) * 1000 + (real.tv_nsec - boot.tv_nsec) / 1'000'000;
}

// A process of the fixture /proc tree, started at `start_ms` (wall) in `container`'s cgroup.
void WriteProcess(const std::string& proc, uint32_t pid, int64_t start_ms,
                  const std::string& container) {
  const std::string dir = proc + "/" + std::to_string(pid);
  std::filesystem::create_directories(dir);
  const long hz = ::sysconf(_SC_CLK_TCK);
  const int64_t ticks = (start_ms - BootMs()) * hz / 1000;
  // A command name with a space and a parenthesis: the fields are counted after the last ')'.
  std::ofstream(dir + "/stat") << pid << " (evil) 1 2) S 1 " << pid << " " << pid
                               << " 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 " << ticks
                               << " 1000 100 18446744073709551615\n";
  std::ofstream(dir + "/cgroup") << "0::/machine.slice/libpod-" << container << ".scope\n";
}

std::unique_ptr<Collector> Open(const std::string& proc) {
  NvmlSourceOptions options;
  options.library = FAKE_NVML;
  GpuIdentity gpu;
  gpu.pci_address = kPci;
  options.gpus.push_back(gpu);
  auto source = OpenNvmlSource(options);
  EXPECT_TRUE(source) << source.error().message;
  if (!source) return nullptr;
  CollectorOptions collector;
  collector.proc_dir = proc;
  return std::make_unique<Collector>(std::move(*source), collector);
}

Directory TwoHolders() {
  Directory dir;
  for (const auto& [key, id] : {std::pair{"c-a", kA}, std::pair{"c-b", kB}}) {
    Holder holder;
    holder.key = key;
    holder.tenancy = std::string("team-") + key[2];
    holder.runtime_id = id;
    holder.gpus = {{kPci, 0.5}};
    dir.holders.push_back(holder);
  }
  return dir;
}

const HolderReading* Find(const PassResult& pass, size_t holder) {
  for (const auto& h : pass.holders)
    if (h.holder == holder) return &h;
  return nullptr;
}

int64_t NowMs() {
  return static_cast<int64_t>(testing::NowMicros() / 1000);
}

TEST(Collector, AReusedPidIsTheNewProcesssFromItsStartAndAGonePidIsNobodys) {
  FakeNvmlState state("");
  FakeNvmlScenario scenario;
  testing::TempDir dir;
  const std::string proc = dir.path() + "/proc";
  WriteProcess(proc, 4242, NowMs() - 60'000, kA);  // A's process, started a minute ago
  const std::string device = std::string("device ") + kPci + " memory_total=85899345920\n";
  const std::string listed = std::string("process ") + kPci + " pid=4242 memory=1073741824\n";
  scenario.Write(device + listed);
  auto collector = Open(proc);
  ASSERT_TRUE(collector);
  Directory dir_ab = TwoHolders();
  Cursors cursors;
  auto first = collector->Collect(dir_ab, cursors, NowMs());
  ASSERT_NE(Find(first, 0), nullptr);
  EXPECT_EQ(Find(first, 0)->gpus.at(0).processes, 1u);
  EXPECT_EQ(collector->last_cost().cgroup_reads, 1u);

  // A's process ends; PID 4242 is B's process now, started just after that pass. NVML still
  // lists 4242 and has samples of it every 100 ms: four from before the new start, four after.
  const int64_t reused_at = NowMs() + 100;
  WriteProcess(proc, 4242, reused_at, kB);
  std::string samples;
  const uint64_t base_us = static_cast<uint64_t>(reused_at - 400) * 1000;
  for (int i = 0; i < 8; ++i)
    samples += std::string("sample ") + kPci +
               " pid=4242 ts=" + std::to_string(base_us + 50'000 + i * 100'000ull) + " sm=50\n";
  scenario.Write(std::string("device ") + kPci +
                 " memory_total=85899345920 util_period_ms=100 util_from_us=" +
                 std::to_string(base_us) + "\n" + listed + samples);
  // The pass comes after the last of them.
  while (NowMs() < reused_at + 500)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto second = collector->Collect(dir_ab, cursors, NowMs());
  EXPECT_EQ(collector->last_cost().cgroup_reads, 1u);  // read again: another process
  const auto* a = Find(second, 0);
  const auto* b = Find(second, 1);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->gpus.at(0).processes, 0u);
  EXPECT_EQ(a->delta, Usage{});
  EXPECT_EQ(b->gpus.at(0).processes, 1u);
  // B: the four samples after its start, one 100 ms period each at 50 %; never the earlier ones.
  EXPECT_NEAR(b->delta.sm_seconds, 4 * 0.1 * 0.5, 1e-9);
  EXPECT_EQ(second.gpus[0].clamps.stale_samples, 4u);
  EXPECT_NEAR(second.gpus[0].unattributed.sm_seconds, 4 * 0.1 * 0.5, 1e-9);
  // Its memory from its start (to the tick, 10 ms), not from the previous pass.
  const double held = (cursors[kPci].sampled_ms - reused_at) / 1000.0;
  EXPECT_NEAR(b->delta.memory_gib_seconds, held, 0.02);

  // The process ends and its /proc entry goes: NVML's last listing of it is nobody's.
  std::filesystem::remove_all(proc + "/4242");
  auto third = collector->Collect(dir_ab, cursors, NowMs());
  EXPECT_EQ(Find(third, 1)->gpus.at(0).processes, 0u);
  EXPECT_EQ(third.gpus[0].unattributed_processes, 1u);
}

TEST(Collector, AFifoInTheProcTreeNeverStallsAPass) {
  FakeNvmlState state("");
  FakeNvmlScenario scenario;
  testing::TempDir dir;
  const std::string proc = dir.path() + "/proc";
  std::filesystem::create_directories(proc + "/77");
  ASSERT_EQ(::mkfifo((proc + "/77/stat").c_str(), 0600), 0);
  WriteProcess(proc, 78, NowMs() - 60'000, kA);
  ::unlink((proc + "/78/cgroup").c_str());
  ASSERT_EQ(::mkfifo((proc + "/78/cgroup").c_str(), 0600), 0);
  scenario.Write(std::string("process ") + kPci + " pid=77 memory=1\nprocess " + kPci +
                 " pid=78 memory=1\n");
  auto collector = Open(proc);
  ASSERT_TRUE(collector);
  Cursors cursors;
  auto pass = collector->Collect(TwoHolders(), cursors, NowMs());
  EXPECT_EQ(pass.gpus[0].unattributed_processes, 2u);
}

TEST(Collector, MemoryAndEnergyAcrossARestartAreChargedForTheTimeBetweenReads) {
  FakeNvmlState state("");
  FakeNvmlScenario scenario;
  testing::TempDir dir;
  const std::string proc = dir.path() + "/proc";
  WriteProcess(proc, 4242, NowMs() - 60'000, kA);
  // 300 W drawn, 700 W the limit.
  scenario.Write(std::string("device ") + kPci +
                 " memory_total=85899345920 power_limit_mw=700000 energy_mj=1000000 "
                 "energy_rate_mw=300000 energy_from_us=" +
                 std::to_string(testing::NowMicros()) + "\nprocess " + kPci +
                 " pid=4242 memory=2147483648\n");
  Directory holders = TwoHolders();
  holders.holders[0].gpus = {{kPci, 1.0}};
  holders.holders.pop_back();
  Cursors cursors;
  {
    auto collector = Open(proc);
    ASSERT_TRUE(collector);
    collector->Collect(holders, cursors, NowMs());
  }
  const GpuCursor before = cursors[kPci];
  // Down for a while (no pass), then a new collector from the saved cursors.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  auto collector = Open(proc);
  ASSERT_TRUE(collector);
  auto pass = collector->Collect(holders, cursors, NowMs());
  const GpuCursor after = cursors[kPci];
  const double seconds = (after.sampled_ms - before.sampled_ms) / 1000.0;
  ASSERT_GT(seconds, 1.4);
  const auto* a = Find(pass, 0);
  ASSERT_NE(a, nullptr);
  // The whole time down: 2 GiB for every second between the two reads of the GPU.
  EXPECT_NEAR(a->delta.memory_gib_seconds, 2 * seconds, 1e-9);
  // Every joule the counter rose by, all A's (it holds the GPU whole): within 300 W of it.
  const double joules = (after.energy_mj - before.energy_mj) / 1000.0;
  EXPECT_NEAR(a->delta.energy_joules, joules, 1e-6);
  EXPECT_NEAR(joules / seconds, 300, 30);
  EXPECT_EQ(pass.gpus[0].clamps, Clamps{});
}

TEST(Collector, HostileReadingsAreBoundedCountedAndEnergyGlitchesChargeNothing) {
  FakeNvmlState state("");
  FakeNvmlScenario scenario;
  testing::TempDir dir;
  const std::string proc = dir.path() + "/proc";
  for (uint32_t pid : {5001u, 5002u, 5003u})
    WriteProcess(proc, pid, NowMs() - 60'000, kA);
  const std::string device = std::string("device ") + kPci +
                             " memory_total=85899345920 power_limit_mw=700000 util_period_ms=100 "
                             "util_from_us=" +
                             std::to_string(testing::NowMicros() - 1'000'000);
  // 2^62 bytes for one process, and another GiB beyond the board with it.
  const std::string processes = std::string("process ") + kPci +
                                " pid=5001 memory=4611686018427387904\nprocess " + kPci +
                                " pid=5002 memory=1073741824\n";
  scenario.Write(device + " energy_mj=1000000\n" + processes);
  Directory holders = TwoHolders();
  holders.holders[0].gpus = {{kPci, 1.0}};
  holders.holders.pop_back();
  auto collector = Open(proc);
  ASSERT_TRUE(collector);
  Cursors cursors;
  collector->Collect(holders, cursors, NowMs());  // the baseline

  // One sample period: the same sample three times, and three processes at 100 % each. The
  // energy counter jumps by 1 kWh.
  const uint64_t at = testing::NowMicros() + 50'000;
  std::string samples;
  for (int i = 0; i < 3; ++i)
    samples += std::string("sample ") + kPci + " pid=5001 ts=" + std::to_string(at) + " sm=100\n";
  for (uint32_t pid : {5002u, 5003u})
    samples += std::string("sample ") + kPci + " pid=" + std::to_string(pid) +
               " ts=" + std::to_string(at) + " sm=100\n";
  scenario.Write(device + " energy_mj=3601000000\n" + processes + samples);
  while (testing::NowMicros() < at + 100'000)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const int64_t before_ms = cursors[kPci].sampled_ms;
  auto pass = collector->Collect(holders, cursors, NowMs());
  const double seconds = (cursors[kPci].sampled_ms - before_ms) / 1000.0;
  const auto* a = Find(pass, 0);
  ASSERT_NE(a, nullptr);
  // One 100 ms period of the whole GPU at most, whatever the processes claim.
  EXPECT_NEAR(a->delta.sm_seconds, 0.1, 1e-9);
  // The board's 80 GiB at most, for the time since the baseline.
  EXPECT_LE(a->gpus.at(0).memory_bytes, 80 * (1ull << 30));
  EXPECT_NEAR(a->delta.memory_gib_seconds, 80 * seconds, 1e-6);
  // The glitch is charged to nobody.
  EXPECT_EQ(a->delta.energy_joules, 0);
  EXPECT_EQ(pass.gpus[0].unattributed.energy_joules, 0);
  Clamps expected;
  expected.duplicate_samples = 2;
  expected.sm_over_gpu = 1;
  expected.memory_over_total = 2;
  expected.energy_refused = 1;
  EXPECT_EQ(pass.gpus[0].clamps, expected);

  // The counter goes back (the driver reloaded): refused again, a new baseline.
  scenario.Write(device + " energy_mj=5000\n" + processes);
  auto back = collector->Collect(holders, cursors, NowMs());
  EXPECT_EQ(Find(back, 0)->delta.energy_joules, 0);
  EXPECT_EQ(back.gpus[0].clamps.energy_refused, 1u);
  EXPECT_EQ(cursors[kPci].energy_mj, 5000u);
}

TEST(ProcDir, OnlyAnAbsoluteDirectoryIsAccepted) {
  testing::TempDir dir;
  EXPECT_TRUE(CheckProcDir("/proc"));
  EXPECT_TRUE(CheckProcDir(dir.path()));
  for (const std::string bad : {"/dev/zero", "proc", "", "/nonexistent-proc-dir"}) {
    auto checked = CheckProcDir(bad);
    ASSERT_FALSE(checked) << bad;
    EXPECT_EQ(checked.error().category, ErrorCategory::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace tessera::telemetry

// The collector's NVML reads against the stand-in libnvidia-ml.so.1 (NVML's ABI, driven by a
// scenario file): a process list that grows between the sizing call and the fill, utilisation
// samples by timestamp with NOT_FOUND for none, energy counters, NOT_SUPPORTED and failures,
// GPU_IS_LOST on one GPU of several, accounting records, Xid events, and MIG: per-instance
// memory from the MIG device handles, SM use from GPM, no GPU utilisation.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <future>

#include "support/fake_nvml_state.h"
#include "telemetry/telemetry.h"

namespace tessera::telemetry {
namespace {

using testing::FakeNvmlScenario;
using testing::FakeNvmlState;

constexpr uint64_t kGiB = 1ull << 30;

std::unique_ptr<GpuSource> Open(std::vector<std::string> pcis) {
  NvmlSourceOptions options;
  options.library = FAKE_NVML;
  for (size_t i = 0; i < pcis.size(); ++i) {
    GpuIdentity gpu;
    gpu.pci_address = pcis[i];
    gpu.index = static_cast<int>(i);
    options.gpus.push_back(gpu);
  }
  auto source = OpenNvmlSource(options);
  EXPECT_TRUE(source) << source.error().message;
  return source ? std::move(*source) : nullptr;
}

TEST(NvmlSource, GpuFiguresAndAListThatGrewBetweenTheTwoCalls) {
  FakeNvmlState state("");
  FakeNvmlScenario scenario;
  std::string text =
      "device 0000:18:00.0 util=87 mem_util=40 memory_used=34359738368 "
      "memory_total=85899345920 power_mw=412000 energy_mj=5000000 temp=61\n"
      "process 0000:18:00.0 pid=101 memory=1073741824\n"
      "process 0000:18:00.0 pid=102 memory=na\n";
  // Six processes start between the sizing call and the fill: more than the headroom, so the
  // fill answers INSUFFICIENT_SIZE and the list is asked for again.
  for (int pid = 200; pid < 206; ++pid)
    text += "process 0000:18:00.0 pid=" + std::to_string(pid) + " memory=1024 late=1\n";
  text += "process 0000:18:00.0 pid=300 memory=2048 mps=1\n";
  scenario.Write(text);
  auto source = Open({"0000:18:00.0"});
  ASSERT_TRUE(source);
  auto readings = source->Read({});
  ASSERT_EQ(readings.size(), 1u);
  const GpuReading& r = readings[0];
  EXPECT_FALSE(r.lost);
  EXPECT_TRUE(r.errors.empty()) << r.errors.front();
  EXPECT_EQ(r.gpu_percent, 87u);
  EXPECT_EQ(r.memory_percent, 40u);
  EXPECT_EQ(r.memory_used, 32 * kGiB);
  EXPECT_EQ(r.memory_total, 80 * kGiB);
  EXPECT_EQ(r.power_mw, 412000u);
  EXPECT_EQ(r.energy_mj, 5000000u);
  EXPECT_EQ(r.temperature_c, 61u);
  EXPECT_EQ(r.identity.uuid, "GPU-0000:18:00.0");  // asked from NVML when not given
  ASSERT_EQ(r.processes.size(), 9u);
  EXPECT_EQ(r.processes[0].pid, 101u);
  EXPECT_EQ(r.processes[0].used_bytes, kGiB);
  EXPECT_FALSE(r.processes[1].used_bytes);  // NVML_VALUE_NOT_AVAILABLE
  EXPECT_TRUE(r.processes.back().mps);      // the MPS client, from the MPS variant
  EXPECT_GT(r.nvml_seconds, 0);
}

TEST(NvmlSource, UtilizationSamplesNewerThanTheCursorAndNotFoundForNone) {
  FakeNvmlState state("");
  FakeNvmlScenario scenario;
  scenario.Write(
      "device 0000:18:00.0 util=50\n"
      "sample 0000:18:00.0 pid=101 ts=1000000 sm=30 mem=5\n"
      "sample 0000:18:00.0 pid=101 ts=2000000 sm=40\n"
      "sample 0000:18:00.0 pid=102 ts=2000000 sm=10\n");
  auto source = Open({"0000:18:00.0"});
  ASSERT_TRUE(source);
  Cursors cursors;
  cursors["0000:18:00.0"].sample_us = 1000000;
  auto readings = source->Read(cursors);
  ASSERT_EQ(readings[0].samples.size(), 2u);
  for (const auto& sample : readings[0].samples)
    EXPECT_EQ(sample.timestamp_us, 2000000u);
  cursors["0000:18:00.0"].sample_us = 2000000;
  readings = source->Read(cursors);
  EXPECT_TRUE(readings[0].samples.empty());  // NOT_FOUND: no new samples, not an error
  EXPECT_TRUE(readings[0].errors.empty());
  // What the stand-in served: exactly the two newer samples.
  EXPECT_EQ(scenario.Served(),
            "sample 0000:18:00.0 101 2000000 40\nsample 0000:18:00.0 102 2000000 10\n");
}

TEST(NvmlSource, EnergyCounterNotSupportedFailuresAndALostGpu) {
  FakeNvmlState state("");
  FakeNvmlScenario scenario;
  const uint64_t now = testing::NowMicros();
  scenario.Write("device 0000:18:00.0 energy_mj=1000 energy_rate_mw=300000 energy_from_us=" +
                 std::to_string(now - 2'000'000) +
                 " temp=50\n"
                 "device 0000:2a:00.0 util=10 lost=1\n"
                 "device 0000:3a:00.0 util=20 energy_mj=7 power_mw=100\n"
                 "fail nvmlDeviceGetTotalEnergyConsumption 3 0000:3a:00.0\n"
                 "fail nvmlDeviceGetPowerUsage 999 0000:3a:00.0\n");
  auto source = Open({"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0"});
  ASSERT_TRUE(source);
  auto readings = source->Read({});
  ASSERT_EQ(readings.size(), 3u);
  // 300 W for two seconds since the counter's base: about 600 J more.
  ASSERT_TRUE(readings[0].energy_mj);
  EXPECT_GE(*readings[0].energy_mj, 1000u + 600'000u);
  EXPECT_LT(*readings[0].energy_mj, 1000u + 660'000u);
  EXPECT_FALSE(readings[0].power_mw);  // not in the scenario: NOT_SUPPORTED, no error
  EXPECT_TRUE(readings[0].errors.empty());
  EXPECT_TRUE(readings[1].lost);
  EXPECT_FALSE(readings[1].gpu_percent);
  EXPECT_FALSE(readings[2].lost);
  EXPECT_EQ(readings[2].gpu_percent, 20u);
  EXPECT_FALSE(readings[2].energy_mj);  // NOT_SUPPORTED
  ASSERT_EQ(readings[2].errors.size(), 1u);
  EXPECT_NE(readings[2].errors[0].find("power: NVML error 999"), std::string::npos);
}

TEST(NvmlSource, AccountingRecordsOfEndedProcessesOnceAndXidEvents) {
  FakeNvmlState state("");
  FakeNvmlScenario scenario;
  testing::TempDir dir;
  const std::string events = dir.path() + "/events";
  std::ofstream(events) << "0000:18:00.0 79\n";
  ::setenv("TESSERA_FAKE_NVML_EVENTS", events.c_str(), 1);
  scenario.Write(
      "device 0000:18:00.0 util=1 accounting=1\n"
      "process 0000:18:00.0 pid=101 memory=10\n"
      "accounting 0000:18:00.0 pid=101 gpu=90 running=1\n"
      "accounting 0000:18:00.0 pid=555 gpu=50 max_memory=1024 time_ms=300 start_us=7 "
      "running=0\n");
  auto source = Open({"0000:18:00.0"});
  ASSERT_TRUE(source);
  auto readings = source->Read({});
  ::unsetenv("TESSERA_FAKE_NVML_EVENTS");
  ASSERT_EQ(readings[0].ended.size(), 1u);
  EXPECT_EQ(readings[0].ended[0].pid, 555u);
  EXPECT_EQ(readings[0].ended[0].gpu_percent, 50u);
  EXPECT_EQ(readings[0].ended[0].time_ms, 300u);
  EXPECT_EQ(readings[0].ended[0].max_memory_bytes, 1024u);
  EXPECT_EQ(readings[0].xids, std::vector<uint64_t>{79});
  readings = source->Read({});
  EXPECT_TRUE(readings[0].ended.empty());  // handed out once
  EXPECT_TRUE(readings[0].xids.empty());
}

TEST(NvmlSource, MigInstancesMemoryFromTheirHandlesAndGpmSmUse) {
  FakeNvmlState state("h100-mig-mixed");
  FakeNvmlScenario scenario;
  scenario.Write(
      "device 0000:18:00.0 util=99 gpm=1 power_mw=300000\n"
      "process 0000:18:00.0 pid=101 memory=2147483648 gi=1 ci=0\n"
      "process 0000:18:00.0 pid=102 memory=1073741824 gi=5 ci=0\n"
      "gpm 0000:18:00.0 gi=1 sm=60\n"
      "gpm 0000:18:00.0 gi=5 sm=10\n");
  auto source = Open({"0000:18:00.0"});
  ASSERT_TRUE(source);
  auto first = source->Read({});
  ASSERT_TRUE(first[0].mig);
  EXPECT_FALSE(first[0].gpu_percent);  // never a GPU_UTIL for a GPU in MIG mode
  ASSERT_EQ(first[0].mig_instances.size(), 3u);
  for (const auto& instance : first[0].mig_instances)
    EXPECT_FALSE(instance.sm_percent);  // GPM needs two samples
  auto second = source->Read({});
  ASSERT_EQ(second[0].mig_instances.size(), 3u);
  const auto& three = second[0].mig_instances[0];
  EXPECT_EQ(three.gpu_instance_id, 1u);
  EXPECT_EQ(three.profile, "3g.40gb");
  EXPECT_NEAR(three.share, 3.0 / 7, 1e-12);
  EXPECT_EQ(three.memory_used, 2 * kGiB);
  EXPECT_EQ(three.memory_total, 40192ull << 20);
  ASSERT_TRUE(three.sm_percent);
  EXPECT_DOUBLE_EQ(*three.sm_percent, 60);
  EXPECT_EQ(second[0].mig_instances[1].profile, "2g.20gb");
  EXPECT_DOUBLE_EQ(*second[0].mig_instances[1].sm_percent, 10);
  EXPECT_EQ(second[0].mig_instances[1].memory_used, kGiB);
  EXPECT_FALSE(second[0].mig_instances[2].sm_percent);  // no GPM line for it
  ASSERT_EQ(second[0].processes.size(), 2u);
  EXPECT_EQ(second[0].processes[0].gpu_instance_id, 1u);
  EXPECT_EQ(second[0].processes[1].gpu_instance_id, 5u);
}

TEST(NvmlSource, NvmlsNameThePowerLimitAndTheDriversSamplePeriod) {
  FakeNvmlState state("");
  FakeNvmlScenario scenario;
  const uint64_t now = testing::NowMicros();
  // GPU utilisation samples every 167 ms (the driver's period), whatever the processes do.
  scenario.Write(
      "device 0000:18:00.0 util=5 name=NVIDIA_H100_80GB_HBM3 power_limit_mw=700000 "
      "util_period_ms=167 util_from_us=" +
      std::to_string(now - 5'000'000) +
      "\n"
      "device 0000:2a:00.0 util=5\n");
  NvmlSourceOptions options;
  options.library = FAKE_NVML;
  for (const char* pci : {"0000:18:00.0", "0000:2a:00.0"}) {
    GpuIdentity gpu;
    gpu.pci_address = pci;
    gpu.model = "GH100 [H100 SXM5 80GB]";  // the inventory's pci.ids name
    options.gpus.push_back(gpu);
  }
  auto source = OpenNvmlSource(options);
  ASSERT_TRUE(source) << source.error().message;
  auto readings = (*source)->Read({});
  ASSERT_EQ(readings.size(), 2u);
  // dcgm-exporter's modelName is NVML's name; without one the inventory's stays.
  EXPECT_EQ(readings[0].identity.model, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(readings[1].identity.model, "GH100 [H100 SXM5 80GB]");
  EXPECT_EQ(readings[0].power_limit_mw, 700000u);
  EXPECT_FALSE(readings[1].power_limit_mw);
  EXPECT_EQ(readings[0].sample_period_us, 167'000u);
  EXPECT_EQ(readings[1].sample_period_us, 0u);
  EXPECT_GT(readings[0].read_ms, 0);
  EXPECT_TRUE(readings[0].errors.empty()) << readings[0].errors.front();
  // The period is kept while no new sample has come, and learnt again from the new ones.
  auto again = (*source)->Read({});
  EXPECT_EQ(again[0].sample_period_us, 167'000u);
}

TEST(NvmlLibrary, APathThatIsNotARegularFileIsRefusedWithoutOpeningIt) {
  testing::TempDir dir;
  const std::string fifo = dir.path() + "/libnvidia-ml.so.1";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // dlopen of a FIFO would wait for a writer forever: the check answers at once.
  auto opened = std::async(std::launch::async, [&] { return nvml::Library::Open(fifo); });
  ASSERT_EQ(opened.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  auto library = opened.get();
  ASSERT_FALSE(library);
  EXPECT_EQ(library.error().category, ErrorCategory::kInvalidArgument);
  EXPECT_NE(library.error().message.find("not a regular file"), std::string::npos);
  EXPECT_FALSE(nvml::CheckLibraryPath("/dev/zero"));
  EXPECT_FALSE(nvml::CheckLibraryPath(dir.path()));
  // A path that is not there is dlopen's to report, as a missing driver (Unavailable).
  EXPECT_TRUE(nvml::CheckLibraryPath(dir.path() + "/missing.so"));
  auto missing = nvml::Library::Open(dir.path() + "/missing.so");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().category, ErrorCategory::kUnavailable);
  // A link to the real file, and a bare name for the loader's search, are fine.
  const std::string link = dir.path() + "/link.so";
  ASSERT_EQ(::symlink(FAKE_NVML, link.c_str()), 0);
  EXPECT_TRUE(nvml::CheckLibraryPath(link));
  EXPECT_TRUE(nvml::CheckLibraryPath("libnvidia-ml.so.1"));
}

}  // namespace
}  // namespace tessera::telemetry

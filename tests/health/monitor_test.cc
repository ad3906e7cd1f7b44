// The Monitor against the stand-in NVML (events file, fault state) and a fixture sysfs tree:
// what it hands the sink, what ReadState answers, and Suspend/Resume around a reset.
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "health/watch/watch.h"
#include "support/fake_nvml_state.h"
#include "support/fixture_host.h"
#include "support/wait.h"

namespace tessera::health {
namespace {

using namespace std::chrono_literals;
using testing::FakeNvmlFaults;
using testing::kEventTimeout;

constexpr char kGpu[] = "0000:65:00.0";
constexpr char kOther[] = "0000:66:00.0";

// What the sink was handed, awaited by the test.
class Signals {
 public:
  Monitor::Sink Sink() {
    return [this](Signal signal) {
      {
        std::lock_guard lock(mutex_);
        signals_.push_back(std::move(signal));
      }
      changed_.notify_all();
    };
  }
  // The first signal `match` accepts, waiting for it with a generous bound.
  std::optional<Signal> WaitFor(const std::function<bool(const Signal&)>& match) {
    std::unique_lock lock(mutex_);
    std::optional<Signal> found;
    changed_.wait_for(lock, kEventTimeout, [&] {
      for (const Signal& signal : signals_)
        if (match(signal)) found = signal;
      return found.has_value();
    });
    return found;
  }
  std::optional<Signal> WaitFor(SignalKind kind, const std::string& gpu = kGpu) {
    return WaitFor([&](const Signal& s) { return s.kind == kind && s.gpu == gpu; });
  }
  size_t Count(const std::function<bool(const Signal&)>& match) const {
    std::lock_guard lock(mutex_);
    return static_cast<size_t>(std::count_if(signals_.begin(), signals_.end(), match));
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Signal> signals_;
};

MonitorOptions FastOptions() {
  MonitorOptions options;
  options.nvml_library = FAKE_NVML;
  options.event_wait = 100ms;
  options.poll_interval = 200ms;
  return options;
}

std::unique_ptr<Monitor> StartOn(std::vector<WatchedGpu> gpus, Signals& signals,
                                 MonitorOptions options = FastOptions()) {
  auto monitor = Monitor::Start(std::move(options), std::move(gpus), signals.Sink());
  EXPECT_TRUE(monitor.ok()) << (monitor.ok() ? "" : monitor.error().message);
  return monitor.ok() ? std::move(*monitor) : nullptr;
}

WatchedGpu Gpu(const std::string& pci, const std::string& uuid = "") {
  WatchedGpu gpu;
  gpu.pci_address = pci;
  gpu.uuid = uuid;
  return gpu;
}

bool IsXid(const Signal& s, uint64_t xid, const std::string& gpu = kGpu) {
  return s.kind == SignalKind::kXid && s.xid == xid && s.gpu == gpu;
}

TEST(Monitor, XidWithItsMigInstanceAndDoubleBitEccArriveAsSignals) {
  FakeNvmlFaults faults;
  Signals signals;
  auto monitor = StartOn({Gpu(kGpu), Gpu(kOther)}, signals);
  ASSERT_TRUE(monitor);

  faults.AddEvent("0000:77:00.0 79");  // a GPU nobody watches: no signal
  faults.AddEvent(std::string(kGpu) + " 94 gi=1 ci=0");
  auto xid = signals.WaitFor([](const Signal& s) { return IsXid(s, 94); });
  ASSERT_TRUE(xid);
  EXPECT_EQ(xid->gpu_instance_id, 1u);
  EXPECT_EQ(xid->compute_instance_id, 0u);
  EXPECT_GT(xid->at_ms, 0);
  // The driver has the recovery action field (none now): it comes with the event.
  EXPECT_EQ(xid->recovery_action, RecoveryAction::kNone);
  EXPECT_EQ(signals.Count([](const Signal& s) { return s.gpu == "0000:77:00.0"; }), 0u);

  faults.AddEvent(std::string(kOther) + " 79");
  xid = signals.WaitFor([](const Signal& s) { return IsXid(s, 79, kOther); });
  ASSERT_TRUE(xid);
  EXPECT_EQ(xid->gpu_instance_id, kWholeGpu);  // no MIG instance named
  EXPECT_EQ(xid->compute_instance_id, kWholeGpu);

  faults.AddEvent(std::string(kGpu) + " ecc");
  EXPECT_TRUE(signals.WaitFor(SignalKind::kDoubleBitEcc));
  EXPECT_EQ(signals.Count([](const Signal& s) { return IsXid(s, 94); }), 1u);  // once
}

TEST(Monitor, RemapPendingIsSignalledAndClearedByAReset) {
  FakeNvmlFaults faults;
  faults.SetFaults(std::string(kGpu) + " uuid=GPU-aaaa remap_pending=0 processes=0\n");
  Signals signals;
  auto monitor = StartOn({Gpu(kGpu, "GPU-aaaa")}, signals);
  ASSERT_TRUE(monitor);
  EXPECT_EQ(monitor->ReadState(kGpu).remap_pending, false);

  faults.SetFaults(std::string(kGpu) + " uuid=GPU-aaaa remap_pending=1 processes=0\n");
  ASSERT_TRUE(signals.WaitFor(SignalKind::kRemapPending));
  GpuState state = monitor->ReadState(kGpu);
  EXPECT_EQ(state.remap_pending, true);
  EXPECT_EQ(state.remap_failure, false);
  EXPECT_EQ(state.processes, 0u);

  monitor->Suspend();
  RecoveryCommands commands;
  commands.reset = {FAKE_NVIDIA_SMI, "-r", "-i", "{uuid}"};
  Status reset = RunReset(commands, Gpu(kGpu, "GPU-aaaa"), 0);
  ASSERT_TRUE(reset.ok()) << reset.error().message;
  monitor->Resume();
  EXPECT_EQ(faults.ResetLog(), "reset GPU-aaaa 0000:65:00.0 -> 0\n");
  state = monitor->ReadState(kGpu);
  EXPECT_EQ(state.remap_pending, false);
  EXPECT_FALSE(state.lost);
  EXPECT_EQ(signals.Count([](const Signal& s) { return s.kind == SignalKind::kRemapPending; }), 1u);
}

TEST(Monitor, RemapFailureRetiredPagesAndUncorrectedEccGrowth) {
  FakeNvmlFaults faults;
  faults.SetFaults(std::string(kGpu) + " ecc_uncorrected=3\n");  // before the watch: no news
  Signals signals;
  auto monitor = StartOn({Gpu(kGpu)}, signals);
  ASSERT_TRUE(monitor);
  ASSERT_TRUE(
      testing::WaitUntil([&] { return monitor->ReadState(kGpu).uncorrected_volatile_ecc == 3u; }));

  faults.SetFaults(std::string(kGpu) + " ecc_uncorrected=5 remap_failure=1 retired_pending=1\n");
  auto ecc = signals.WaitFor(SignalKind::kUncorrectedEcc);
  ASSERT_TRUE(ecc);
  EXPECT_EQ(ecc->count, 5u);
  EXPECT_TRUE(signals.WaitFor(SignalKind::kRemapFailure));
  EXPECT_TRUE(signals.WaitFor(SignalKind::kRetiredPagesPending));
  EXPECT_EQ(signals.Count([](const Signal& s) { return s.kind == SignalKind::kUncorrectedEcc; }),
            1u);
}

TEST(Monitor, GpuIsLostOnceAndReadStateSaysSo) {
  FakeNvmlFaults faults;
  Signals signals;
  auto monitor = StartOn({Gpu(kGpu), Gpu(kOther)}, signals);
  ASSERT_TRUE(monitor);
  faults.SetFaults(std::string(kGpu) + " lost=1\n");
  ASSERT_TRUE(signals.WaitFor(SignalKind::kGpuLost));
  GpuState state = monitor->ReadState(kGpu);
  EXPECT_TRUE(state.lost);
  EXPECT_FALSE(state.remap_pending);  // nothing else can be read of it
  EXPECT_FALSE(state.processes);
  EXPECT_FALSE(monitor->ReadState(kOther).lost);

  // Polls go on; the GPU stays lost and is not signalled again.
  faults.SetFaults(std::string(kGpu) + " lost=1\n" + kOther + " remap_pending=1\n");
  ASSERT_TRUE(signals.WaitFor(SignalKind::kRemapPending, kOther));
  EXPECT_EQ(signals.Count([](const Signal& s) { return s.kind == SignalKind::kGpuLost; }), 1u);
}

TEST(Monitor, RecoveryActionChangeWithXid154) {
  FakeNvmlFaults faults;
  Signals signals;
  auto monitor = StartOn({Gpu(kGpu)}, signals);
  ASSERT_TRUE(monitor);
  EXPECT_EQ(monitor->ReadState(kGpu).recovery_action, RecoveryAction::kNone);

  faults.SetFaults(std::string(kGpu) + " recovery_action=4\n");
  faults.AddEvent(std::string(kGpu) + " 154");
  auto xid = signals.WaitFor([](const Signal& s) { return IsXid(s, 154); });
  ASSERT_TRUE(xid);
  EXPECT_EQ(xid->recovery_action, RecoveryAction::kDrainAndReset);
  auto changed = signals.WaitFor(SignalKind::kRecoveryAction);
  ASSERT_TRUE(changed);
  EXPECT_EQ(changed->recovery_action, RecoveryAction::kDrainAndReset);

  faults.SetFaults(std::string(kGpu) + " recovery_action=2\n");
  faults.AddEvent(std::string(kGpu) + " 154");
  ASSERT_TRUE(signals.WaitFor([](const Signal& s) {
    return s.kind == SignalKind::kRecoveryAction &&
           s.recovery_action == RecoveryAction::kNodeReboot;
  }));
  EXPECT_EQ(monitor->ReadState(kGpu).recovery_action, RecoveryAction::kNodeReboot);
}

TEST(Monitor, DriverWithoutTheFieldsAnswersNothing) {
  FakeNvmlFaults faults;
  faults.SetFaults(std::string(kGpu) + " recovery_action=na remap_pending=na retired_pending=na\n");
  Signals signals;
  auto monitor = StartOn({Gpu(kGpu)}, signals);
  ASSERT_TRUE(monitor);
  GpuState state = monitor->ReadState(kGpu);
  EXPECT_FALSE(state.recovery_action);
  EXPECT_FALSE(state.remap_pending);
  EXPECT_FALSE(state.remap_failure);
  EXPECT_FALSE(state.retired_pages_pending);
  EXPECT_EQ(state.uncorrected_volatile_ecc, 0u);
  faults.AddEvent(std::string(kGpu) + " 48");
  auto xid = signals.WaitFor([](const Signal& s) { return IsXid(s, 48); });
  ASSERT_TRUE(xid);
  EXPECT_FALSE(xid->recovery_action);
}

TEST(Monitor, SuspendLetsGoOfNvmlSoTheResetIsNotRefused) {
  FakeNvmlFaults faults;
  faults.SetFaults(std::string(kGpu) + " uuid=GPU-bbbb processes=0\n");
  Signals signals;
  auto monitor = StartOn({Gpu(kGpu, "GPU-bbbb")}, signals);
  ASSERT_TRUE(monitor);
  faults.AddEvent(std::string(kGpu) + " 79");
  ASSERT_TRUE(signals.WaitFor([](const Signal& s) { return IsXid(s, 79); }));
  faults.SetFaults(std::string(kGpu) + " uuid=GPU-bbbb lost=1 processes=0\n");
  ASSERT_TRUE(signals.WaitFor(SignalKind::kGpuLost));
  RecoveryCommands commands;
  commands.reset = {FAKE_NVIDIA_SMI, "-r", "-i", "{uuid}"};

  // This process holds NVML: the reset is refused, as nvidia-smi refuses one beside a monitor.
  Status refused = RunReset(commands, Gpu(kGpu, "GPU-bbbb"), 0);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("In use by another client"), std::string::npos)
      << refused.error().message;

  monitor->Suspend();
  monitor->Suspend();  // twice is once
  Status reset = RunReset(commands, Gpu(kGpu, "GPU-bbbb"), 0);
  EXPECT_TRUE(reset.ok()) << reset.error().message;
  monitor->Resume();
  EXPECT_FALSE(monitor->ReadState(kGpu).lost);
  EXPECT_EQ(faults.ResetLog(),
            "reset GPU-bbbb 0000:65:00.0 -> 1\nreset GPU-bbbb 0000:65:00.0 -> 0\n");

  // Events flow again after Resume, and what came before is not handed over twice.
  faults.AddEvent(std::string(kGpu) + " 31");
  ASSERT_TRUE(signals.WaitFor([](const Signal& s) { return IsXid(s, 31); }));
  EXPECT_EQ(signals.Count([](const Signal& s) { return IsXid(s, 79); }), 1u);
  // The GPU is back; falling off again is news again.
  faults.SetFaults(std::string(kGpu) + " uuid=GPU-bbbb lost=1\n");
  ASSERT_TRUE(testing::WaitUntil([&] {
    return signals.Count([](const Signal& s) { return s.kind == SignalKind::kGpuLost; }) == 2;
  }));
}

TEST(Monitor, UnavailableWithoutNvmlOrGpus) {
  Signals signals;
  MonitorOptions options = FastOptions();
  options.nvml_library = "/nonexistent/libnvidia-ml.so.1";
  auto monitor = Monitor::Start(options, {Gpu(kGpu)}, signals.Sink());
  ASSERT_FALSE(monitor.ok());
  EXPECT_EQ(monitor.error().category, ErrorCategory::kUnavailable);
  EXPECT_FALSE(Monitor::Start(FastOptions(), {}, signals.Sink()).ok());
}

// ---- GPUs no driver holds: sysfs ----

class SysfsTree {
 public:
  SysfsTree() : device_(dir_.path() + "/sys/bus/pci/devices/" + kGpu) {
    std::filesystem::create_directories(device_);
    std::string config(64, '\0');
    config[0] = '\xde';  // vendor 0x10de
    config[1] = '\x10';
    WriteFile("config", config);
    SetAerFatal(0);
  }
  const std::string& root() const { return dir_.path(); }
  void SetAerFatal(uint64_t total) const {
    WriteFile("aer_dev_fatal", "Undefined 0\nDLP 0\nSDES 0\nTLP 0\nFCP 0\nCmpltTO " +
                                   std::to_string(total) + "\nMalfTLP 0\nTOTAL_ERR_FATAL " +
                                   std::to_string(total) + "\n");
  }
  void ConfigAllOnes() const { WriteFile("config", std::string(256, '\xff')); }
  void Remove() const { std::filesystem::remove_all(device_); }

 private:
  void WriteFile(const std::string& name, const std::string& text) const {
    const std::string temporary = device_ + "/." + name;
    std::ofstream(temporary, std::ios::binary | std::ios::trunc) << text;
    std::filesystem::rename(temporary, device_ + "/" + name);
  }
  testing::TempDir dir_;
  std::string device_;
};

TEST(Monitor, WithoutTheDriverAerFatalGrowthConfigAllOnesAndAVanishedDevice) {
  SysfsTree sysfs;
  sysfs.SetAerFatal(2);  // before the watch: no news
  Signals signals;
  MonitorOptions options = FastOptions();
  options.root = sysfs.root();
  options.nvml_library = "/nonexistent/libnvidia-ml.so.1";  // no NVML: sysfs alone watches
  WatchedGpu vfio = Gpu(kGpu);
  vfio.nvidia_driver = false;
  auto monitor = StartOn({vfio}, signals, options);
  ASSERT_TRUE(monitor);
  EXPECT_FALSE(monitor->ReadState(kGpu).lost);

  sysfs.SetAerFatal(3);
  auto aer = signals.WaitFor(SignalKind::kAerFatal);
  ASSERT_TRUE(aer);
  EXPECT_EQ(aer->count, 3u);

  sysfs.ConfigAllOnes();
  ASSERT_TRUE(signals.WaitFor(SignalKind::kConfigAllOnes));
  EXPECT_TRUE(monitor->ReadState(kGpu).lost);

  sysfs.Remove();
  ASSERT_TRUE(signals.WaitFor(SignalKind::kDeviceGone));
  EXPECT_TRUE(monitor->ReadState(kGpu).lost);
  EXPECT_EQ(signals.Count([](const Signal& s) { return s.kind == SignalKind::kAerFatal; }), 1u);
}

}  // namespace
}  // namespace tessera::health

#include "dra/fault_watch.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "dra/faults.h"
#include "health/watch/watch.h"

namespace tessera::dra {
namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// One entry per GPU (MIG devices name their parent once), in PCI order as the node lists them.
std::vector<health::WatchedGpu> WatchedGpus(const NodeDevices& node) {
  std::vector<health::WatchedGpu> gpus;
  for (const auto& device : node.devices) {
    auto same = std::find_if(gpus.begin(), gpus.end(), [&](const health::WatchedGpu& gpu) {
      return gpu.pci_address == device.pci_address;
    });
    if (same == gpus.end()) {
      health::WatchedGpu gpu;
      gpu.pci_address = device.pci_address;
      gpu.uuid = device.type == "mig" ? device.parent_uuid : device.uuid;
      gpu.nvidia_driver = device.type != "vfio";
      gpus.push_back(std::move(gpu));
      same = gpus.end() - 1;
    }
    if (device.gpu_instance_id) same->mig_gpu_instances.push_back(*device.gpu_instance_id);
  }
  return gpus;
}

void LogRestored(const FaultState& restored) {
  for (const auto& [pci, record] : restored) {
    if (record.health.in_service()) continue;
    spdlog::warn("GPU {}: restored {} ({}); its devices stay tainted {}={} {}", pci,
                 health::RecoveryStepName(record.health.step), record.health.reason, kFaultTaintKey,
                 record.taint.value, TaintEffectName(record.taint.effect));
  }
}

}  // namespace

struct FaultWatch::State {
  std::vector<health::WatchedGpu> gpus;
  health::RecoveryCommands commands;
  const Driver* driver = nullptr;
  std::string state_path;  // <plugin-dir>/gpu-faults.json
  std::unique_ptr<FaultHandler> handler;
  std::unique_ptr<health::Monitor> monitor;
  std::mutex mu;  // guards stop and wake
  std::condition_variable cv;
  bool stop = false;
  bool wake = false;
  std::map<std::string, health::RecoveryStep> logged;  // by PCI address, the recovery thread's
  std::thread recovery;

  const health::WatchedGpu* Find(const std::string& pci, int* index) const;
  RecoveryHooks Hooks(const Driver& driver);
  void OnSignal(const health::Signal& signal);
  void LogSteps();
  void RecoverLoop();
};

const health::WatchedGpu* FaultWatch::State::Find(const std::string& pci, int* index) const {
  for (size_t i = 0; i < gpus.size(); ++i) {
    if (gpus[i].pci_address != pci) continue;
    *index = static_cast<int>(i);
    return &gpus[i];
  }
  return nullptr;
}

RecoveryHooks FaultWatch::State::Hooks(const Driver& driver) {
  RecoveryHooks hooks;
  hooks.read_state = [this](const std::string& pci) { return monitor->ReadState(pci); };
  hooks.suspend = [this] { monitor->Suspend(); };
  hooks.resume = [this] { monitor->Resume(); };
  if (!commands.reset.empty()) {
    hooks.reset = [this](const std::string& pci) -> Status {
      int index = 0;
      const health::WatchedGpu* gpu = Find(pci, &index);
      if (!gpu) return NotFound("GPU " + pci + " is not watched");
      return health::RunReset(commands, *gpu, index);
    };
  }
  if (!commands.self_test.empty()) {
    hooks.self_test = [this](const std::string& pci) {
      int index = 0;
      const health::WatchedGpu* gpu = Find(pci, &index);
      if (!gpu) return health::SelfTestVerdict{false, "GPU " + pci + " is not watched"};
      return health::RunSelfTest(commands, *gpu, index);
    };
  }
  hooks.claims_holding = [&driver](const std::string& pci) { return driver.ClaimsHolding(pci); };
  hooks.persist = [this](const FaultState& records) -> Status {
    Status written = WriteFaultStateFile(state_path, records);
    if (!written) {
      spdlog::error("GPU fault state {}: {}; a restart would forget these faults", state_path,
                    written.error().message);
    }
    return written;
  };
  return hooks;
}

void FaultWatch::State::OnSignal(const health::Signal& signal) {
  health::Decision decision = handler->OnSignal(signal, NowMs());
  if (decision.fault_class == health::FaultClass::kIgnore) {
    spdlog::info("GPU {}: {} ignored", signal.gpu, health::SignalKindName(signal.kind));
  } else if (decision.takes_gpu_out) {
    // The claims named: their Pods are the ones a NoExecute taint evicts.
    std::string claims;
    for (const auto& uid : driver->ClaimsHolding(signal.gpu))
      claims += (claims.empty() ? "" : ", ") + uid;
    bool out = handler->Records()[signal.gpu].step == health::RecoveryStep::kOut;
    spdlog::warn("{} ({}): its devices are tainted {} {} {}; claims holding it: {}",
                 decision.reason, decision.action, kFaultTaintKey,
                 TaintEffectName(EffectOf(decision)),
                 out ? "and it stays out" : "until it is reset and verified",
                 claims.empty() ? "none" : claims);
  } else {
    spdlog::info("{} ({})", decision.reason, decision.action);
  }
  std::lock_guard lock(mu);
  wake = true;
  cv.notify_all();
}

void FaultWatch::State::LogSteps() {
  for (const auto& [pci, record] : handler->Records()) {
    auto& seen = logged[pci];
    if (seen == record.step) continue;
    seen = record.step;
    if (record.in_service()) {
      spdlog::info("GPU {}: back in service, untainted", pci);
    } else {
      spdlog::info("GPU {}: recovery step {} ({})", pci, health::RecoveryStepName(record.step),
                   record.reason);
    }
  }
}

// Each faulted GPU goes as far as it can, then the thread waits for a signal or a second.
void FaultWatch::State::RecoverLoop() {
  for (;;) {
    {
      std::unique_lock lock(mu);
      cv.wait_for(lock, std::chrono::seconds(1), [this] { return stop || wake; });
      if (stop) return;
      wake = false;
    }
    for (int pass = 0; pass < 16 && handler->Recover(NowMs()); ++pass) {
      LogSteps();
      std::lock_guard lock(mu);
      if (stop) return;
    }
    LogSteps();
  }
}

Result<std::unique_ptr<FaultWatch>> FaultWatch::Start(const PluginOptions& options,
                                                      const Driver& driver) {
  auto table = options.fault_table.empty() ? Result<health::XidTable>(health::XidTable::Default())
                                           : health::XidTable::Load(options.fault_table);
  if (!table) return table.error().WithContext("--fault-table");
  // A fault state that cannot be read fails the start: starting without it would publish a
  // faulted GPU untainted.
  std::string state_path = options.plugin_dir + "/" + std::string(kFaultStateFile);
  auto read = ReadFaultStateFile(state_path);
  if (!read) {
    return InvalidArgument("GPU fault state: " + read.error().message +
                           " (a faulted GPU would be published untainted; fix or remove it)");
  }
  FaultState restored = std::move(*read);
  auto state = std::make_unique<State>();
  state->driver = &driver;
  state->state_path = state_path;
  state->gpus = WatchedGpus(driver.node());
  if (state->gpus.empty()) return Unavailable("no GPU to watch");
  state->commands.reset = health::CommandWords(options.gpu_reset_command);
  state->commands.self_test = health::CommandWords(options.self_test_command);
  FaultOptions fault_options;
  fault_options.recover = options.recover;
  state->handler =
      std::make_unique<FaultHandler>(std::move(*table), fault_options, state->Hooks(driver));
  state->handler->Restore(restored);
  LogRestored(restored);
  health::MonitorOptions monitor_options;
  monitor_options.nvml_library = options.nvml_library;
  monitor_options.root = options.root;
  State* raw = state.get();
  auto monitor = health::Monitor::Start(monitor_options, state->gpus,
                                        [raw](health::Signal signal) { raw->OnSignal(signal); });
  if (!monitor) {
    // A faulted GPU may be why nothing can watch (NVML fails to start): its taint stays.
    size_t out = std::count_if(restored.begin(), restored.end(),
                               [](const auto& gpu) { return !gpu.second.health.in_service(); });
    if (out == 0) return monitor.error();
    spdlog::warn(
        "GPU fault watch off: {}; {} restored faulted GPU(s) keep their taint, "
        "not recovered",
        monitor.error().message, out);
    return std::unique_ptr<FaultWatch>(new FaultWatch(std::move(state)));
  }
  state->monitor = std::move(*monitor);
  state->recovery = std::thread([raw] { raw->RecoverLoop(); });
  return std::unique_ptr<FaultWatch>(new FaultWatch(std::move(state)));
}

FaultWatch::FaultWatch(std::unique_ptr<State> state) : state_(std::move(state)) {}

FaultWatch::~FaultWatch() {
  {
    std::lock_guard lock(state_->mu);
    state_->stop = true;
    state_->cv.notify_all();
  }
  if (state_->recovery.joinable()) state_->recovery.join();
  state_->monitor.reset();
}

std::map<std::string, DeviceFault> FaultWatch::Faults() const {
  return state_->handler->Faults();
}

bool FaultWatch::Follow(const std::map<std::string, health::GpuHealth>& published) {
  return state_->handler->Follow(published, NowMs());
}

}  // namespace tessera::dra

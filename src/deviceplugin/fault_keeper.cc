#include "deviceplugin/fault_keeper.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <set>

#include "common/untrusted_text.h"
#include "podresources/podresources.h"

namespace tessera::deviceplugin {
namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The NVIDIA GPUs behind the advertised devices, once each (a MIG device names its parent).
std::vector<health::WatchedGpu> WatchedGpus(const ResourceManager& manager) {
  std::vector<health::WatchedGpu> gpus;
  for (const PhysicalDevice& device : manager.devices()) {
    if (device.vendor_id != 0x10de) continue;
    auto it = std::find_if(gpus.begin(), gpus.end(), [&](const health::WatchedGpu& gpu) {
      return gpu.pci_address == device.pci_address;
    });
    if (it == gpus.end()) {
      health::WatchedGpu gpu;
      gpu.pci_address = device.pci_address;
      gpu.nvidia_driver = device.driver == "nvidia";
      it = gpus.insert(gpus.end(), std::move(gpu));
    }
    if (device.mig) {
      if (it->uuid.empty()) it->uuid = device.parent_uuid;
      it->mig_gpu_instances.push_back(device.gpu_instance_id);
    } else if (device.uuid) {
      it->uuid = *device.uuid;
    }
  }
  return gpus;
}

std::string JoinNames(const std::vector<std::string>& names) {
  if (names.empty()) return "none";
  std::string out;
  for (const auto& name : names)
    out += (out.empty() ? "" : ", ") + name;
  return out;
}

}  // namespace

Result<std::unique_ptr<FaultKeeper>> FaultKeeper::Start(std::shared_ptr<ResourceManager> manager,
                                                        const Config& config) {
  if (!config.health.enabled || !config.windows_snapshot.empty())
    return std::unique_ptr<FaultKeeper>();
  auto table = config.health.fault_table.empty()
                   ? Result<health::XidTable>(health::XidTable::Default())
                   : health::XidTable::Load(config.health.fault_table);
  if (!table) return table.error().WithContext("fault table");
  std::unique_ptr<FaultKeeper> keeper(
      new FaultKeeper(std::move(manager), config.health, std::move(*table)));
  auto saved = ReadGpuHealthFile(config.health.state_file);
  if (!saved) {
    // A file that cannot be read must not hand faulted GPUs out again: refuse to start.
    return saved.error().WithContext("GPU health file");
  }
  for (auto& [pci, gpu] : *saved) {
    if (!gpu.in_service()) {
      keeper->manager_->SetFault(pci, health::kWholeGpu, gpu.reason);
      spdlog::warn("{}: Unhealthy since an earlier run ({}: {})", pci,
                   health::RecoveryStepName(gpu.step), Excerpt(gpu.reason, 300));
    }
  }
  keeper->health_ = std::move(*saved);
  if (config.health.nvml && !keeper->gpus_.empty()) {
    health::MonitorOptions options;
    options.nvml_library = config.health.nvml_library;
    options.root = config.root;
    FaultKeeper* self = keeper.get();
    auto monitor = health::Monitor::Start(options, keeper->gpus_,
                                          [self](health::Signal signal) { self->Post(signal); });
    if (!monitor) {
      spdlog::info("NVML Xid events off: {}", monitor.error().message);
    } else {
      keeper->monitor_ = std::move(*monitor);
    }
  }
  keeper->thread_ = std::thread([self = keeper.get()] { self->Run(); });
  return keeper;
}

FaultKeeper::FaultKeeper(std::shared_ptr<ResourceManager> manager, const HealthConfig& config,
                         health::XidTable table)
    : manager_(std::move(manager)), config_(config), classifier_(std::move(table)) {
  commands_.reset = config.reset_command;
  commands_.self_test = config.self_test_command;
  gpus_ = WatchedGpus(*manager_);
}

FaultKeeper::~FaultKeeper() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  // The keeper's thread uses the monitor (a step in progress finishes first); the monitor's
  // sink only queues, which stays valid until the monitor is gone.
  if (thread_.joinable()) thread_.join();
  monitor_.reset();
}

void FaultKeeper::Post(health::Signal signal) {
  {
    std::lock_guard lock(mutex_);
    if (queue_.size() >= 4096) queue_.pop_front();  // a storm keeps the newest
    queue_.push_back(std::move(signal));
  }
  wake_.notify_all();
}

void FaultKeeper::Run() {
  const auto interval = std::chrono::milliseconds(config_.recovery_interval_ms);
  for (;;) {
    std::deque<health::Signal> signals;
    {
      std::unique_lock lock(mutex_);
      wake_.wait_for(lock, interval, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      signals.swap(queue_);
    }
    for (const auto& signal : signals)
      Handle(signal);
    for (auto& [pci, gpu] : health_) {
      if (!gpu.in_service() && gpu.step != health::RecoveryStep::kOut) Recover(pci);
    }
  }
}

void FaultKeeper::Handle(const health::Signal& signal) {
  if (signal.kind == health::SignalKind::kXid && config_.ignored_xids.count(signal.xid)) return;
  if (!Watched(signal.gpu, nullptr)) return;  // not a GPU this plugin advertises
  auto pods = PodsHolding(signal.gpu, health::kWholeGpu);
  health::Decision decision = classifier_.Classify(signal, pods);
  if (decision.fault_class == health::FaultClass::kIgnore && !decision.takes_gpu_out) {
    spdlog::debug("{}: {} ignored", signal.gpu, Excerpt(decision.reason, 300));
    return;
  }
  health::GpuHealth& gpu = health_[signal.gpu];
  health::RecordFault(gpu, signal, decision, policy_, NowMs());
  if (!decision.takes_gpu_out) {
    spdlog::warn("{} ({}): the GPU stays in service; Pods on it: {}", Excerpt(decision.reason, 300),
                 decision.action, JoinNames(pods));
  } else {
    uint32_t instance =
        decision.reach == health::Reach::kInstance ? decision.gpu_instance_id : health::kWholeGpu;
    manager_->SetFault(signal.gpu, instance, decision.reason);
    if (instance != health::kWholeGpu) pods = PodsHolding(signal.gpu, instance);
    spdlog::warn(
        "{} ({}): Unhealthy{}, recovery {}; Pods holding it: {}", Excerpt(decision.reason, 300),
        decision.action,
        instance == health::kWholeGpu ? "" : " (GPU instance " + std::to_string(instance) + ")",
        health::RecoveryStepName(gpu.step), JoinNames(pods));
  }
  Save();
}

// Runs the GPU's recovery steps as far as they go now: a step that must wait, or one that
// failed (tried again on a later round, not at once), ends the round.
void FaultKeeper::Recover(const std::string& pci) {
  health::GpuHealth& gpu = health_[pci];
  bool progressed = false;
  while (!gpu.in_service() && gpu.step != health::RecoveryStep::kOut) {
    auto outcome = RunStep(pci, gpu);
    if (!outcome) break;
    progressed = true;
    // Remap failure or NODE_REBOOT (no retry): never reset in a loop, it stays out.
    health::Advance(gpu, outcome->passed, outcome->detail, policy_, NowMs(), outcome->reset_helps);
    if (!outcome->passed && gpu.step != health::RecoveryStep::kOut) {
      spdlog::warn("{}: recovery failed ({} of {} attempts): {}", pci, gpu.attempts,
                   policy_.max_attempts, Excerpt(outcome->detail, 300));
      break;
    }
  }
  if (!progressed) return;
  Save();  // durable before kubelet hears of it: a restart never forgets a step it announced
  if (gpu.in_service()) {
    manager_->ClearFault(pci);
    spdlog::info("{}: reset and verified: Healthy", pci);
  } else if (gpu.step == health::RecoveryStep::kOut) {
    spdlog::error("{}: stays out of service: {}", pci, Excerpt(gpu.reason, 300));
  }
}

// The outcome of the GPU's step in progress; nullopt when it has to wait (the GPU is still in
// use, or there is no monitor).
std::optional<FaultKeeper::StepOutcome> FaultKeeper::RunStep(const std::string& pci,
                                                             const health::GpuHealth& gpu) {
  int index = 0;
  const health::WatchedGpu* watched = Watched(pci, &index);
  if (!monitor_ || !watched) return std::nullopt;
  switch (gpu.step) {
    case health::RecoveryStep::kDraining:
      if (!Drained(pci)) return std::nullopt;
      return StepOutcome{true, true, ""};
    case health::RecoveryStep::kResetting: {
      if (commands_.reset.empty()) return StepOutcome{false, false, "no reset command is set"};
      spdlog::info("{}: resetting ({})", pci, Excerpt(gpu.reason, 200));
      monitor_->Suspend();  // a reset is refused while any NVML handle is open
      Status reset = health::RunReset(commands_, *watched, index);
      monitor_->Resume();
      if (!reset) return StepOutcome{false, true, "reset: " + reset.error().message};
      return StepOutcome{true, true, ""};
    }
    case health::RecoveryStep::kVerifying: {
      auto unfit = health::JudgeState(monitor_->ReadState(pci));
      if (unfit) return StepOutcome{false, unfit->reset_helps, unfit->reason};
      return StepOutcome{true, true, ""};
    }
    case health::RecoveryStep::kSelfTest: {
      if (commands_.self_test.empty()) return StepOutcome{true, true, ""};
      auto verdict = health::RunSelfTest(commands_, *watched, index);
      return StepOutcome{verdict.passed, true, "self-test: " + verdict.reason};
    }
    default:  // kFirmware is serve's (policy_.firmware_step is false here)
      return StepOutcome{true, true, ""};
  }
}

// No Pod holds any device of the GPU (when kubelet answers) and NVML sees no process on it.
bool FaultKeeper::Drained(const std::string& pci) {
  if (!PodsHolding(pci, health::kWholeGpu).empty()) return false;
  health::GpuState state = monitor_->ReadState(pci);
  if (state.processes) return *state.processes == 0;
  return state.lost;  // a GPU off the bus answers nothing, and runs nothing either
}

// "namespace/name" of the Pods whose containers kubelet gave devices of the GPU (or of the GPU
// instance). Empty when kubelet's PodResources is not configured or does not answer.
std::vector<std::string> FaultKeeper::PodsHolding(const std::string& pci,
                                                  uint32_t gpu_instance_id) {
  if (config_.pod_resources_socket.empty()) return {};
  auto list = podresources::List(config_.pod_resources_socket, std::chrono::seconds(2));
  if (!list) {
    if (!pods_warned_) {
      spdlog::warn("kubelet PodResources: {} (a faulted GPU's Pods are not known)",
                   list.error().message);
    }
    pods_warned_ = true;
    return {};
  }
  pods_warned_ = false;
  std::set<std::pair<std::string, std::string>> ids;
  for (auto& id : manager_->AdvertisedIds(pci, gpu_instance_id))
    ids.insert(std::move(id));
  std::vector<std::string> pods;
  for (const auto& pod : list->pods) {
    bool holds = false;
    for (const auto& container : pod.devices) {
      for (const auto& id : container.ids)
        holds = holds || ids.count({container.resource, id}) > 0;
    }
    if (holds) pods.push_back(pod.namespace_name + "/" + pod.name);
  }
  return pods;
}

const health::WatchedGpu* FaultKeeper::Watched(const std::string& pci, int* index) const {
  for (size_t i = 0; i < gpus_.size(); ++i) {
    if (gpus_[i].pci_address != pci) continue;
    if (index) *index = static_cast<int>(i);
    return &gpus_[i];
  }
  return nullptr;
}

void FaultKeeper::Save() {
  if (auto status = WriteGpuHealthFile(config_.state_file, health_); !status)
    spdlog::error("GPU health file not written: {}", status.error().message);
}

}  // namespace tessera::deviceplugin

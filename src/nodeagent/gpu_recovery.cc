// Detection and recovery of this node's GPUs: the monitor's signals through the classifier into
// each GPU's health, and a faulted GPU's recovery steps once nothing holds it.
#include "nodeagent/gpu_recovery.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <deque>
#include <thread>

#include "common/untrusted_text.h"
#include "health/watch/watch.h"
#include "podresources/podresources.h"

namespace tessera::nodeagent {
namespace gpu_recovery_detail {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The GPUs of `gpus` a DRA claim's device holds: the DRA driver names a GPU's device "gpu-" and
// its PCI address in lower case with every other character a dash (dra::DeviceNameFor), and
// its MIG devices that name followed by "-mig-…". Any driver's device so named counts: a
// false match only delays a reset.
std::vector<std::string> PciAddressesOfClaimDevice(const std::string& device,
                                                   const k8s::NodeGpus& gpus) {
  std::vector<std::string> out;
  for (const auto& gpu : gpus.gpus) {
    std::string name = "gpu-";
    for (char c : gpu.pci_address) {
      char lower = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      name += std::isalnum(static_cast<unsigned char>(c)) ? lower : '-';
    }
    if (device == name || device.starts_with(name + "-")) out.push_back(gpu.pci_address);
  }
  return out;
}

// The tenancies whose leases hold `pci` now (an application fault is counted by them).
std::vector<std::string> TenanciesOn(const std::map<std::string, k8s::Json>& leases,
                                     const std::string& pci) {
  std::vector<std::string> out;
  for (const auto& [name, lease] : leases) {
    const k8s::Json& spec = k8s::ObjectField(lease, "spec");
    const k8s::Json& status = k8s::ObjectField(lease, "status");
    bool holds = false;
    for (const auto* field :
         {&k8s::ArrayField(spec, "gpuIds"), &k8s::ArrayField(status, "allocatedDevices")}) {
      for (const auto& id : *field)
        holds = holds || (id.is_string() && id.get<std::string>() == pci);
    }
    std::string tenancy = k8s::StringField(spec, "tenancy");
    if (holds && !tenancy.empty() && std::find(out.begin(), out.end(), tenancy) == out.end())
      out.push_back(std::move(tenancy));
  }
  return out;
}

class Recovery final : public GpuRecovery {
 public:
  Recovery(const LeaseSyncOptions& options, const k8s::NodeGpus& gpus, NodeHealth& board,
           NodeLeases& leases, health::XidTable table, ReleaseNvml release_nvml)
      : options_(options),
        gpus_(gpus),
        board_(board),
        leases_(leases),
        release_nvml_(std::move(release_nvml)),
        classifier_(std::move(table)) {
    commands_.reset = health::CommandWords(options.gpu_reset_command);
    commands_.self_test = health::CommandWords(options.gpu_self_test_command);
    for (const auto& gpu : gpus.gpus)
      watched_.push_back({gpu.pci_address, gpu.uuid, true, {}});
  }

  ~Recovery() override {
    stop_ = true;
    monitor_.reset();  // its thread calls OnSignal
    woken_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  const std::vector<health::WatchedGpu>& watched() const { return watched_; }

  void Start(std::unique_ptr<health::Monitor> monitor) {
    monitor_ = std::move(monitor);
    thread_ = std::thread([this] { Run(); });
  }

  // The monitor's sink (its thread): queued for the recovery thread, which wakes at once.
  void OnSignal(health::Signal signal) {
    {
      std::lock_guard lock(mu_);
      if (queue_.size() < 4096) queue_.push_back(std::move(signal));
    }
    woken_.notify_all();
  }

 private:
  void Run() {
    while (!stop_) {
      std::deque<health::Signal> signals;
      {
        std::unique_lock lock(mu_);
        woken_.wait_for(lock, std::chrono::milliseconds(options_.gpu_recovery_interval_ms),
                        [&] { return stop_ || !queue_.empty(); });
        signals.swap(queue_);
      }
      for (const auto& signal : signals)
        Record(signal);
      if (!stop_) StepAll();
    }
  }

  void Record(const health::Signal& signal) {
    auto decision = classifier_.Classify(signal, TenanciesOn(leases_.Snapshot(), signal.gpu));
    if (decision.fault_class == health::FaultClass::kIgnore) return;
    std::fprintf(stderr, "tessera-lease-sync: gpu %s: %s (%s)\n", Excerpt(signal.gpu, 64).c_str(),
                 Excerpt(decision.reason, 300).c_str(), decision.action.c_str());
    health::GpuHealth health = board_.Of(signal.gpu);
    health::RecordFault(health, signal, decision, policy_, NowMs());
    board_.Set(signal.gpu, health);  // published at once
  }

  // Every GPU in recovery, each as far as it goes now.
  void StepAll() {
    pods_checked_ = false;
    for (const auto& [pci, health] : board_.Snapshot()) {
      for (int step = 0; step < 8 && !stop_; ++step) {
        if (!StepOnce(pci)) break;
      }
    }
  }

  const health::WatchedGpu* Watched(const std::string& pci, int* index) const {
    for (size_t i = 0; i < watched_.size(); ++i) {
      if (watched_[i].pci_address == pci) {
        *index = static_cast<int>(i);
        return &watched_[i];
      }
    }
    return nullptr;
  }

  // One step of `pci`'s recovery; whether it moved.
  bool StepOnce(const std::string& pci) {
    int index = 0;
    const auto* gpu = Watched(pci, &index);
    health::GpuHealth health = board_.Of(pci);
    if (!gpu || health.step == health::RecoveryStep::kHealthy ||
        health.step == health::RecoveryStep::kOut)
      return false;
    const health::RecoveryStep before = health.step;
    switch (health.step) {
      case health::RecoveryStep::kDraining:
        if (!Empty(pci)) return false;
        health::Advance(health, true, "", policy_, NowMs());
        break;
      case health::RecoveryStep::kResetting:
        Reset(*gpu, index, health);
        break;
      case health::RecoveryStep::kVerifying:
        Verify(pci, health);
        break;
      case health::RecoveryStep::kSelfTest:
        SelfTest(*gpu, index, health);
        break;
      default:  // kFirmware: the lease flow's check belongs to serve
        health::Advance(health, true, "", policy_, NowMs());
        break;
    }
    std::fprintf(stderr, "tessera-lease-sync: gpu %s: %s -> %s%s%s\n", pci.c_str(),
                 health::RecoveryStepName(before), health::RecoveryStepName(health.step),
                 health.reason.empty() ? "" : ": ", Excerpt(health.reason, 300).c_str());
    board_.Set(pci, health);
    return health.step != before;
  }

  // No Pod holds the GPU (kubelet's allocations: device-plugin devices and DRA claims) and NVML
  // shows no process on it.
  bool Empty(const std::string& pci) {
    if (!pods_checked_) {
      pods_checked_ = true;
      held_.clear();
      auto list = podresources::List(options_.pod_resources_socket, std::chrono::seconds(5));
      pods_known_ = list.ok();
      // A kubelet that is down says so every round: each new problem is logged once.
      std::string problem = list.ok() ? "" : list.error().message;
      if (!problem.empty() && problem != pods_problem_)
        std::fprintf(stderr, "tessera-lease-sync: faulted GPUs wait: PodResources: %s\n",
                     problem.c_str());
      pods_problem_ = std::move(problem);
      if (list) {
        for (const auto& pod : list->pods) {
          for (const auto& container : pod.devices) {
            for (const auto& id : k8s::PciAddressesOfDeviceIds(container.ids, gpus_))
              held_.push_back(id);
          }
          // A DRA claim's devices hold their GPU as long as kubelet lists the Pod.
          for (const auto& claimed : pod.claim_devices) {
            for (const auto& pci : PciAddressesOfClaimDevice(claimed.device, gpus_))
              held_.push_back(pci);
          }
        }
      }
    }
    if (!pods_known_ || std::count(held_.begin(), held_.end(), pci) > 0) return false;
    // A GPU that fell off the bus answers no process list: kubelet's word is all there is (and
    // the reset is refused while anything still holds it).
    auto state = monitor_->ReadState(pci);
    return state.lost || (state.processes.has_value() && *state.processes == 0);
  }

  void Reset(const health::WatchedGpu& gpu, int index, health::GpuHealth& health) {
    // NVML handles open here make the driver refuse the reset ("In use by another client").
    monitor_->Suspend();
    if (release_nvml_) release_nvml_(true);
    auto status = health::RunReset(commands_, gpu, index);
    if (release_nvml_) release_nvml_(false);
    monitor_->Resume();
    health::Advance(health, status.ok(), status.ok() ? "" : "reset: " + status.error().message,
                    policy_, NowMs());
  }

  void Verify(const std::string& pci, health::GpuHealth& health) {
    // Remap failure or NODE_REBOOT: no reset brings it back, it stays out.
    auto unfit = health::JudgeState(monitor_->ReadState(pci));
    health::Advance(health, !unfit, unfit ? "verify: " + unfit->reason : "", policy_, NowMs(),
                    !unfit || unfit->reset_helps);
  }

  void SelfTest(const health::WatchedGpu& gpu, int index, health::GpuHealth& health) {
    if (commands_.self_test.empty()) {
      health::Advance(health, true, "", policy_, NowMs());
      return;
    }
    auto verdict = health::RunSelfTest(commands_, gpu, index);
    health::Advance(health, verdict.passed, verdict.passed ? "" : "self-test: " + verdict.reason,
                    policy_, NowMs());
  }

  const LeaseSyncOptions& options_;
  const k8s::NodeGpus gpus_;
  NodeHealth& board_;
  NodeLeases& leases_;
  ReleaseNvml release_nvml_;
  health::Classifier classifier_;  // the recovery thread's only
  health::RecoveryPolicy policy_;
  health::RecoveryCommands commands_;
  std::vector<health::WatchedGpu> watched_;
  std::unique_ptr<health::Monitor> monitor_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable woken_;
  std::deque<health::Signal> queue_;  // guarded by mu_
  // This round's PodResources answer: the PCI addresses its Pods hold.
  bool pods_checked_ = false;
  bool pods_known_ = false;
  std::vector<std::string> held_;
  std::string pods_problem_;  // the last PodResources problem logged
  std::thread thread_;
};

}  // namespace gpu_recovery_detail

Result<std::unique_ptr<GpuRecovery>> StartGpuRecovery(const LeaseSyncOptions& options,
                                                      const k8s::NodeGpus& gpus, NodeHealth& board,
                                                      NodeLeases& leases,
                                                      ReleaseNvml release_nvml) {
  if (!options.gpu_health) return std::unique_ptr<GpuRecovery>();
  auto table = options.fault_table.empty() ? Result<health::XidTable>(health::XidTable::Default())
                                           : health::XidTable::Load(options.fault_table);
  if (!table) return table.error().WithContext("--fault-table");
  auto recovery = std::make_unique<gpu_recovery_detail::Recovery>(
      options, gpus, board, leases, std::move(*table), std::move(release_nvml));
  health::MonitorOptions watch;
  watch.nvml_library = options.nvml;
  watch.root = options.root;
  auto* target = recovery.get();
  auto monitor = health::Monitor::Start(
      std::move(watch), recovery->watched(),
      [target](health::Signal signal) { target->OnSignal(std::move(signal)); });
  if (!monitor) {
    std::fprintf(stderr, "tessera-lease-sync: GPU health off: %s\n",
                 monitor.error().message.c_str());
    return std::unique_ptr<GpuRecovery>();
  }
  recovery->Start(std::move(*monitor));
  std::fprintf(stderr, "tessera-lease-sync: watching %zu GPUs for faults\n", gpus.gpus.size());
  return std::unique_ptr<GpuRecovery>(std::move(recovery));
}

}  // namespace tessera::nodeagent

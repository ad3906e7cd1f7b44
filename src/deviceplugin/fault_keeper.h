// The device plugin's GPU faults (docs/faults.md): the health module's Monitor watches the node's
// GPUs; each Signal goes through the Classifier (the fault table), and a decision that takes a
// GPU out makes its devices (or, for a fault contained to a GPU instance, that instance's MIG
// devices) Unhealthy in ListAndWatch, with the Pods that hold them named in the log. Application
// and trend faults change nothing. A faulted GPU then goes through recovery on the keeper's
// thread: once no Pod holds it (kubelet's PodResources) and NVML sees no process on it, the
// monitor lets go of NVML, the reset command runs, NVML state is verified and the self-test
// runs; only then is it Healthy again. A GPU no reset can repair stays Unhealthy. Each step is
// kept in the GPU health file, so a restart neither forgets a faulted GPU nor its step.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "deviceplugin/deviceplugin.h"
#include "deviceplugin/gpu_health_file.h"
#include "health/watch/watch.h"

namespace tessera::deviceplugin {

class FaultKeeper {
 public:
  // Null on Windows nodes and when health is off. The fault table must load (InvalidArgument
  // naming it otherwise); a monitor that cannot start is logged ("NVML Xid events off: …") and
  // the keeper runs without one: faulted GPUs from the health file stay Unhealthy.
  static Result<std::unique_ptr<FaultKeeper>> Start(std::shared_ptr<ResourceManager> manager,
                                                    const Config& config);
  ~FaultKeeper();
  FaultKeeper(const FaultKeeper&) = delete;
  FaultKeeper& operator=(const FaultKeeper&) = delete;

 private:
  FaultKeeper(std::shared_ptr<ResourceManager> manager, const HealthConfig& config,
              health::XidTable table);
  void Post(health::Signal signal);  // the monitor's sink (its thread)
  void Run();
  void Handle(const health::Signal& signal);
  struct StepOutcome {
    bool passed = false;
    bool reset_helps = true;  // false: it stays out (remap failure, NODE_REBOOT)
    std::string detail;       // why it failed
  };
  void Recover(const std::string& pci);
  std::optional<StepOutcome> RunStep(const std::string& pci, const health::GpuHealth& gpu);
  bool Drained(const std::string& pci);
  std::vector<std::string> PodsHolding(const std::string& pci, uint32_t gpu_instance_id);
  const health::WatchedGpu* Watched(const std::string& pci, int* index) const;
  void Save();

  std::shared_ptr<ResourceManager> manager_;
  HealthConfig config_;
  health::Classifier classifier_;
  health::RecoveryPolicy policy_;
  health::RecoveryCommands commands_;
  std::vector<health::WatchedGpu> gpus_;
  // Owned by the keeper's thread (and Start, before the thread runs).
  GpuHealthMap health_;
  std::unique_ptr<health::Monitor> monitor_;
  bool pods_warned_ = false;

  std::mutex mutex_;  // guards queue_ and stop_
  std::condition_variable wake_;
  std::deque<health::Signal> queue_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace tessera::deviceplugin

// This host's GPU health (embedded mode): the health monitor watches its GPUs and hands each
// fault to the service, and the service's recovery reads NVML state through the monitor and
// runs the reset and self-test commands (docs/faults.md).
#include <spdlog/spdlog.h>

#include <algorithm>

#include "health/watch/watch.h"
#include "serve/recovery.h"
#include "wiring.h"

namespace tessera::serve_program {
namespace {

// What recovery reads and runs here. A reset runs with no NVML handle of this process open on
// the GPU: the monitor and telemetry close theirs meanwhile.
class HostRecoveryIo final : public serve::RecoveryIo {
 public:
  HostRecoveryIo(health::Monitor& monitor, health::RecoveryCommands commands,
                 std::map<std::string, health::WatchedGpu> watched, serve::Service& service,
                 std::shared_ptr<const fabricmanager::PartitionActivator> fabric)
      : monitor_(monitor),
        commands_(std::move(commands)),
        watched_(std::move(watched)),
        service_(service),
        fabric_(std::move(fabric)) {}

  health::GpuState ReadState(const fleet::GpuRecord& gpu) override {
    health::GpuState state = monitor_.ReadState(gpu.pci_address);
    // The fabric manager refuses to reset a GPU of an active NVLink partition: one still held
    // (or whose deactivation is being retried) counts as a process on the GPU, so the reset
    // waits for the partition to go.
    if (fabric_ && fabric_->HoldsAnyOf({gpu.pci_address}))
      state.processes = std::max<uint32_t>(state.processes.value_or(0), 1);
    return state;
  }

  Status Reset(const fleet::GpuRecord& gpu) override {
    if (commands_.reset.empty())
      return FailedPrecondition("no --gpu-reset-command: faulted GPUs are not reset here");
    service_.SuspendTelemetry();
    monitor_.Suspend();
    Status status = health::RunReset(commands_, Watched(gpu), gpu.index);
    monitor_.Resume();
    service_.ResumeTelemetry();
    return status;
  }

  std::optional<health::SelfTestVerdict> SelfTest(const fleet::GpuRecord& gpu) override {
    if (commands_.self_test.empty()) return std::nullopt;
    return health::RunSelfTest(commands_, Watched(gpu), gpu.index);
  }

 private:
  health::WatchedGpu Watched(const fleet::GpuRecord& gpu) const {
    auto it = watched_.find(gpu.pci_address);
    if (it != watched_.end()) return it->second;
    health::WatchedGpu fallback;
    fallback.pci_address = gpu.pci_address;
    fallback.uuid = gpu.uuid;
    return fallback;
  }

  health::Monitor& monitor_;
  const health::RecoveryCommands commands_;
  const std::map<std::string, health::WatchedGpu> watched_;
  serve::Service& service_;
  const std::shared_ptr<const fabricmanager::PartitionActivator> fabric_;  // partition mode
};

// This host's NVIDIA GPUs as the monitor watches them: those on the nvidia driver through NVML,
// the others (VFIO, no driver) through sysfs.
std::vector<health::WatchedGpu> WatchedGpus(const inventory::Inventory& inventory) {
  std::vector<health::WatchedGpu> out;
  for (const auto* gpu : inventory.Gpus()) {
    if (gpu->vendor_id != 0x10de) continue;
    health::WatchedGpu watched;
    watched.pci_address = gpu->pci_address;
    watched.uuid = gpu->gpu_uuid.value_or("");
    watched.nvidia_driver = gpu->driver == "nvidia";
    if (gpu->mig)
      for (const auto& device : gpu->mig->devices)
        watched.mig_gpu_instances.push_back(device.gpu_instance_id);
    out.push_back(std::move(watched));
  }
  return out;
}

// A duration flag CheckFlags accepted.
std::chrono::milliseconds HealthDuration(const serve::DurationFlag& flag, const std::string& text) {
  auto parsed = serve::ParseDurationFlag(flag, text);
  if (!parsed) Die(parsed.error());
  return *parsed;
}

}  // namespace

std::unique_ptr<health::Monitor> WatchHostHealth(
    const ServeFlags& flags, const HostGpus& host, serve::Service& service,
    std::shared_ptr<const fabricmanager::PartitionActivator> fabric) {
  if (host.fleet_mode) return nullptr;  // the node agents watch the fleet's GPUs
  if (flags.no_health) {
    spdlog::info("health: not watching GPUs (--no-health)");
    return nullptr;
  }
  std::vector<health::WatchedGpu> gpus = WatchedGpus(host.inventory);
  if (gpus.empty()) return nullptr;
  health::MonitorOptions options;
  options.nvml_library = host.nvml_library.empty() ? "libnvidia-ml.so.1" : host.nvml_library;
  options.root = host.root;
  options.poll_interval =
      HealthDuration(serve::kHealthPollIntervalFlag, flags.health_poll_interval);
  std::map<std::string, health::WatchedGpu> by_pci;
  for (const auto& gpu : gpus)
    by_pci[gpu.pci_address] = gpu;
  auto monitor = health::Monitor::Start(
      options, std::move(gpus), [&service](health::Signal signal) { service.OnGpuSignal(signal); });
  if (!monitor) {
    spdlog::warn("health: GPUs not watched for faults: {}", monitor.error().message);
    return nullptr;
  }
  health::RecoveryCommands commands;
  commands.reset = health::CommandWords(flags.gpu_reset_command);
  commands.self_test = health::CommandWords(flags.gpu_self_test_command);
  commands.timeout = HealthDuration(serve::kGpuRecoveryTimeoutFlag, flags.gpu_recovery_timeout);
  spdlog::info("health: watching {} GPUs for faults", by_pci.size());
  service.SetRecoveryIo(std::make_unique<HostRecoveryIo>(
      **monitor, std::move(commands), std::move(by_pci), service, std::move(fabric)));
  return std::move(*monitor);
}

}  // namespace tessera::serve_program

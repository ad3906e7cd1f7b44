#include "deviceplugin/mps_keeper.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <vector>

#include "mps/mps.h"
#include "nvml/nvml.h"

namespace tessera::deviceplugin {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

mps::Options DaemonOptions(const MpsSharing& sharing) {
  mps::Options options;
  options.root = sharing.root;
  options.control_binary = sharing.control_binary;
  options.shm_bytes = sharing.shm_bytes;
  options.command_timeout = std::chrono::milliseconds(sharing.command_timeout_ms);
  return options;
}

// One MPS GPU as the keeper follows it.
struct Gpu {
  int device = 0;  // index into the manager's devices
  mps::DaemonConfig config;
  std::unique_ptr<mps::Daemon> daemon;
  std::string fault;  // why it is not up; empty when it is
};

// The GPUs of the resources shared through MPS.
std::vector<Gpu> MpsGpusOf(const ResourceManager& manager) {
  std::vector<Gpu> gpus;
  for (size_t i = 0; i < manager.devices().size(); ++i) {
    const PhysicalDevice& device = manager.devices()[i];
    if (device.mps_replicas == 0) continue;
    Gpu gpu;
    gpu.device = static_cast<int>(i);
    gpu.config.gpu_uuid = *device.uuid;
    gpu.config.pci_address = device.pci_address;
    gpus.push_back(std::move(gpu));
  }
  return gpus;
}

// Daemons an earlier run left for GPUs no longer shared through MPS go first.
void RemoveUnsharedDaemons(const ResourceManager& manager, const std::vector<Gpu>& gpus,
                           const mps::Options& options, nvml::Library& nvml) {
  std::map<std::string, std::string> pci_of_uuid;
  for (const PhysicalDevice& device : manager.devices())
    if (device.uuid) pci_of_uuid[*device.uuid] = device.pci_address;
  for (const std::string& uuid : mps::Daemon::Existing(options.root)) {
    const bool wanted = std::any_of(gpus.begin(), gpus.end(),
                                    [&](const Gpu& gpu) { return gpu.config.gpu_uuid == uuid; });
    if (wanted || !pci_of_uuid.count(uuid)) continue;
    if (auto status = mps::Daemon::Remove(options, nvml, uuid, pci_of_uuid[uuid]); !status)
      spdlog::warn("MPS daemon of {} (no longer shared): {}", uuid, status.error().message);
    else
      spdlog::info("MPS daemon of {} torn down: the GPU is no longer shared through MPS", uuid);
  }
}

// Limits: the GPU over its replicas (NVIDIA's plugin does the same); then its daemon.
void OpenGpuDaemon(ResourceManager& manager, Gpu& gpu, const PhysicalDevice& device,
                   const mps::Options& options, nvml::Library& nvml) {
  auto handle = nvml.GpuByPci(gpu.config.pci_address);
  auto memory = handle ? nvml.MemoryTotal(*handle) : Result<uint64_t>(handle.error());
  if (!memory) {
    gpu.fault = "GPU memory: " + memory.error().message;
    return;
  }
  gpu.config.pinned_memory_limit_bytes =
      std::max<uint64_t>(kMiB, *memory / static_cast<uint64_t>(device.mps_replicas) / kMiB * kMiB);
  gpu.config.active_thread_percentage = std::max(1, 100 / device.mps_replicas);
  manager.SetMpsLimits(gpu.device,
                       {gpu.config.pinned_memory_limit_bytes, gpu.config.active_thread_percentage,
                        mps::ConfigHash(gpu.config)});
  auto daemon = mps::Daemon::Open(options, nvml, gpu.config);
  if (daemon) {
    gpu.daemon = std::move(*daemon);
    gpu.fault.clear();
  } else {
    gpu.fault = daemon.error().message;
  }
}

// A failed check makes the GPU unhealthy at once (kubelet stops placing on it), then the
// restarted daemon brings it back with its limits.
void CheckGpuDaemon(ResourceManager& manager, Gpu& gpu, const PhysicalDevice& device) {
  auto check = gpu.daemon->Check();
  if (check) return;
  gpu.fault = check.error().message;
  manager.SetMpsState(gpu.device, "", gpu.fault);
  spdlog::error("{}: {}; restarting it", device.pci_address, gpu.fault);
  if (auto restarted = gpu.daemon->Restart(); restarted) {
    gpu.fault.clear();
  } else {
    gpu.fault = restarted.error().message;
  }
}

// Tells the manager the ready marker and fault; logs when the GPU's health changed.
void ReportGpuDaemon(ResourceManager& manager, const Gpu& gpu, const PhysicalDevice& device) {
  const std::string marker = gpu.daemon ? mps::ReadReadyMarker(gpu.daemon->paths()) : "";
  if (manager.SetMpsState(gpu.device, marker, gpu.fault)) {
    const DeviceHealth health = manager.Health(gpu.device);
    if (health.mps_fault.empty())
      spdlog::info("{}: MPS daemon ready ({})", device.pci_address, marker);
    else
      spdlog::warn("{}: {}", device.pci_address, health.mps_fault);
  }
}

}  // namespace

std::unique_ptr<MpsKeeper> MpsKeeper::Start(std::shared_ptr<ResourceManager> manager) {
  const auto& devices = manager->devices();
  if (std::none_of(devices.begin(), devices.end(),
                   [](const PhysicalDevice& d) { return d.mps_replicas > 0; }))
    return nullptr;
  std::unique_ptr<MpsKeeper> keeper(new MpsKeeper(std::move(manager)));
  keeper->thread_ = std::thread([raw = keeper.get()] { raw->Run(); });
  return keeper;
}

MpsKeeper::MpsKeeper(std::shared_ptr<ResourceManager> manager) : manager_(std::move(manager)) {}

MpsKeeper::~MpsKeeper() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void MpsKeeper::Run() {
  const Config& config = manager_->config();
  const MpsSharing& sharing = config.sharing.mps;
  const mps::Options options = DaemonOptions(sharing);
  const auto interval = std::chrono::milliseconds(sharing.check_interval_ms);
  auto stopping = [this](std::chrono::milliseconds wait) {
    std::unique_lock lock(mutex_);
    return wake_.wait_for(lock, wait, [this] { return stop_; });
  };

  std::vector<Gpu> gpus = MpsGpusOf(*manager_);

  // NVML: the GPUs' memory, and their compute mode. Without it no daemon starts.
  std::unique_ptr<nvml::Library> nvml;
  while (!nvml) {
    auto opened = nvml::Library::Open(config.health.nvml_library);
    if (opened) {
      nvml = std::move(*opened);
      break;
    }
    for (const Gpu& gpu : gpus)
      manager_->SetMpsState(gpu.device, "", "NVML: " + opened.error().message);
    spdlog::error("MPS sharing: {}", opened.error().message);
    if (stopping(std::chrono::seconds(5))) return;
  }

  RemoveUnsharedDaemons(*manager_, gpus, options, *nvml);

  // One thread per GPU: a daemon that hangs holds up its own GPU's checks for one command
  // time-out at most, never another GPU's.
  auto keep = [&](Gpu& gpu) {
    for (;;) {
      const PhysicalDevice& device = manager_->devices()[gpu.device];
      if (!gpu.daemon) {
        OpenGpuDaemon(*manager_, gpu, device, options, *nvml);
      } else {
        CheckGpuDaemon(*manager_, gpu, device);
      }
      ReportGpuDaemon(*manager_, gpu, device);
      if (stopping(interval)) return;
    }
  };
  std::vector<std::thread> keepers;
  keepers.reserve(gpus.size());
  for (Gpu& gpu : gpus)
    keepers.emplace_back([&keep, &gpu] { keep(gpu); });
  for (auto& keeper : keepers)
    keeper.join();
}

}  // namespace tessera::deviceplugin

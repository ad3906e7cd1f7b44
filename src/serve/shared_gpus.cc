#include "serve/shared_gpus.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <random>

#include "nvml/nvml.h"
#include "process/process.h"

namespace tessera::serve {

using fleet::ContainerRecord;
using fleet::ContainerState;
using fleet::GpuRecord;
using fleet::Mutation;

SharedGpus::SharedGpus(Model& model, const SharingOptions& options)
    : model_(model), options_(options), watchdog_(options.grace) {}

SharedGpus::~SharedGpus() {
  Stop();
}

void SharedGpus::Start() {
  auto leftovers = Leftovers();
  std::lock_guard lock(mutex_);
  if (running_) return;
  stop_ = false;
  running_ = true;
  for (auto& [key, leftover] : leftovers) {
    const std::string pci = leftover.pci;
    GpuOfLocked(key, pci).leftover = std::move(leftover);
  }
  for (auto& [pci, gpu] : gpus_)
    StartKeeperLocked(pci, *gpu);
  watchdog_thread_ = std::thread([this] { WatchLoop(); });
}

std::map<std::string, SharedGpus::Leftover> SharedGpus::Leftovers() {
  std::map<std::string, Leftover> leftovers;
  std::lock_guard lock(model_.mu);
  const auto existing = mps::Daemon::Existing(options_.mps.root);
  for (const auto& gpu : model_.gpus) {
    if (!gpu.node.empty()) continue;
    if (gpu.mig_enabled) {
      LeftoversOfMig(gpu, existing, leftovers);
      continue;
    }
    if (gpu.uuid.empty()) continue;
    const auto mps_holder = std::find_if(
        gpu.shares.begin(), gpu.shares.end(),
        [](const fleet::ShareHolder& h) { return h.share.mode == sharing::Mode::kMps; });
    if (mps_holder != gpu.shares.end()) {
      auto container = model_.containers.find(mps_holder->container_id);
      if (container == model_.containers.end()) continue;
      if (auto start = StartOfLocked(container->second)) {
        leftovers[gpu.pci_address].pci = gpu.pci_address;
        leftovers[gpu.pci_address].take_over = std::move(*start);
      }
    } else if (std::binary_search(existing.begin(), existing.end(), gpu.uuid)) {
      leftovers[gpu.pci_address].pci = gpu.pci_address;
      leftovers[gpu.pci_address].remove_uuid = gpu.uuid;
    }
  }
  return leftovers;
}

void SharedGpus::Settle(const std::string& key, Gpu& gpu) {
  const std::string& pci = gpu.pci;
  Leftover leftover = std::move(gpu.leftover);
  gpu.leftover = {};
  if (leftover.take_over) {
    if (auto ready = Prepare(*leftover.take_over); !ready)
      spdlog::error("GPU {}: its MPS daemon: {}", key, ready.error().message);
  } else if (!leftover.remove_uuid.empty()) {
    std::lock_guard lock(gpu.mutex);
    if (gpu.daemon) return;  // a share came first and made its own
    auto nvml = Nvml();
    Status removed =
        nvml ? mps::Daemon::Remove(options_.mps, **nvml, leftover.remove_uuid, pci) : nvml.error();
    if (!removed)
      spdlog::warn("GPU {}: the MPS daemon an earlier run left: {}", key, removed.error().message);
    else
      spdlog::info("GPU {}: the MPS daemon an earlier run left (no share holds it) torn down", key);
  }
}

void SharedGpus::Stop() {
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
    running_ = false;
    for (auto& [pci, gpu] : gpus_)
      if (gpu->keeper.joinable()) threads.push_back(std::move(gpu->keeper));
    if (watchdog_thread_.joinable()) threads.push_back(std::move(watchdog_thread_));
  }
  wake_.notify_all();
  // Each is bounded by one daemon command's time-out (or one restart) at most.
  for (auto& thread : threads)
    thread.join();
}

uint64_t SharedGpus::limits_restored() const {
  std::lock_guard lock(mutex_);
  uint64_t total = 0;
  for (const auto& [pci, gpu] : gpus_) {
    total += gpu->restored;
    std::unique_lock gpu_lock(gpu->mutex, std::try_to_lock);
    if (gpu_lock && gpu->daemon) total += gpu->daemon->limits_restored();
  }
  return total;
}

SharedGpus::Gpu& SharedGpus::GpuOf(const std::string& key, const std::string& pci) {
  std::lock_guard lock(mutex_);
  return GpuOfLocked(key, pci);
}

SharedGpus::Gpu& SharedGpus::GpuOfLocked(const std::string& key, const std::string& pci) {
  auto& entry = gpus_[key];
  if (!entry) {
    entry = std::make_unique<Gpu>();
    entry->pci = pci;
    if (running_) StartKeeperLocked(key, *entry);
  }
  return *entry;
}

void SharedGpus::StartKeeperLocked(const std::string& key, Gpu& gpu) {
  if (gpu.keeper.joinable()) return;
  gpu.keeper = std::thread([this, key, &gpu] { Keep(key, gpu); });
}

Result<const nvml::Library*> SharedGpus::Nvml() {
  std::lock_guard lock(mutex_);
  if (!nvml_) {
    auto opened = nvml::Library::Open(options_.nvml_library);
    if (!opened) return opened.error().WithContext("MPS needs NVML for the compute mode");
    nvml_ = std::move(*opened);
  }
  return nvml_.get();
}

std::map<std::string, std::string> SharedGpus::ReadyHashes() const {
  std::lock_guard lock(mutex_);
  std::map<std::string, std::string> out;
  for (const auto& [pci, gpu] : gpus_) {
    std::unique_lock gpu_lock(gpu->mutex, std::try_to_lock);
    if (gpu_lock && gpu->daemon) out[pci] = mps::ReadReadyMarker(gpu->daemon->paths());
  }
  return out;
}

Result<ShareStart> SharedGpus::StartOfLocked(const ContainerRecord& container) const {
  if (!container.spec.share || container.gpus.size() != 1)
    return Internal("container " + container.id + " holds no share of one GPU");
  const GpuRecord* gpu = model_.FindGpu(container.gpus.front());
  if (!gpu) return NotFound("container " + container.id + ": its GPU is gone");
  ShareStart start;
  start.container_id = container.id;
  start.pci_address = gpu->pci_address;
  start.uuid = gpu->uuid;
  start.share = *container.spec.share;
  if (!start.share.mig_profile.empty()) {
    // A share of a MIG slice: the slice's own daemon, named by its MIG device.
    if (container.mig_devices.size() != 1)
      return Internal("container " + container.id + " holds no MIG slice");
    start.mig_device = container.mig_devices.front();
    start.uuid = start.mig_device;
  }
  start.config.gpu_uuid = start.uuid;
  start.config.pci_address = gpu->pci_address;
  start.config.pinned_memory_limit_bytes = start.share.memory_bytes;
  start.config.active_thread_percentage = start.share.compute_percent;
  for (const auto& holder : gpu->shares) {
    if (holder.mig_device != start.mig_device) continue;  // another slice's daemon
    start.config.pinned_memory_limit_bytes =
        std::max(start.config.pinned_memory_limit_bytes, holder.share.memory_bytes);
    start.config.active_thread_percentage =
        std::max(start.config.active_thread_percentage, holder.share.compute_percent);
  }
  return start;
}

Status SharedGpus::SetTimeslice(const std::string& uuid, int value) {
  process::Options run;
  run.timeout_ms = 30000;
  run.max_output = 4096;
  const std::vector<std::string> argv = {options_.nvidia_smi, "compute-policy",     "-i", uuid,
                                         "--set-timeslice",   std::to_string(value)};
  auto outcome = process::Run(argv, run);
  if (!outcome) return outcome.error();
  if (outcome->timed_out || outcome->status != 0)
    return Unavailable(process::Describe(argv) + " failed: " + outcome->output);
  return Ok();
}

Result<sharing::ClientEdits> SharedGpus::Prepare(const ShareStart& start) {
  Gpu& gpu =
      GpuOf(start.mig_device.empty() ? start.pci_address : start.mig_device, start.pci_address);
  std::lock_guard lock(gpu.mutex);
  if (start.share.mode == sharing::Mode::kTimeslice) {
    if (options_.timeslice >= 0 && !gpu.timesliced) {
      if (auto status = SetTimeslice(start.uuid, options_.timeslice); !status)
        return status.error().WithContext("time-slice of " + start.pci_address);
      gpu.timesliced = true;
    }
    return sharing::ClientEdits{};
  }
  auto nvml = Nvml();
  if (!nvml) return nvml.error();
  mps::DaemonConfig config = start.config;
  if (gpu.daemon) {
    // Limits only grow while the daemon lives: a share placed earlier and starting later must
    // never find them lowered below its own.
    const auto& current = gpu.daemon->config();
    config.pinned_memory_limit_bytes =
        std::max(config.pinned_memory_limit_bytes, current.pinned_memory_limit_bytes);
    config.active_thread_percentage =
        std::max(config.active_thread_percentage, current.active_thread_percentage);
    if (auto status = gpu.daemon->Apply(config); !status) return status.error();
  } else {
    auto opened = mps::Daemon::Open(options_.mps, **nvml, config);
    if (!opened) return opened.error();
    gpu.daemon = std::move(*opened);
  }
  // Nothing starts before the marker holds the hash of the config now in force.
  const std::string marker = mps::ReadReadyMarker(gpu.daemon->paths());
  if (marker != gpu.daemon->hash())
    return Unavailable("MPS daemon of " + start.pci_address + " is not ready (marker \"" + marker +
                       "\", config " + gpu.daemon->hash() + ")");
  return sharing::MpsClientEdits(start.share, gpu.daemon->paths().pipe, gpu.daemon->paths().shm);
}

Status SharedGpus::Release(const GpuRecord& record) {
  if (record.mig_enabled) return ReleaseMig(record);
  Gpu& gpu = GpuOf(record.pci_address, record.pci_address);
  std::lock_guard lock(gpu.mutex);
  Status result = Ok();
  if (gpu.daemon) {
    result = gpu.daemon->Stop();
    gpu.restored += gpu.daemon->limits_restored();
    gpu.daemon.reset();
  } else if (!record.uuid.empty()) {
    // One an earlier run of the service left and nothing took over.
    const auto existing = mps::Daemon::Existing(options_.mps.root);
    if (std::binary_search(existing.begin(), existing.end(), record.uuid)) {
      auto nvml = Nvml();
      result = nvml ? mps::Daemon::Remove(options_.mps, **nvml, record.uuid, record.pci_address)
                    : Status(nvml.error());
    }
  }
  if (gpu.timesliced) {
    if (auto status = SetTimeslice(record.uuid, 0); !status && result) result = status;
    gpu.timesliced = false;
  }
  return result;
}

void SharedGpus::Keep(std::string key, Gpu& gpu) {
  Settle(key, gpu);
  std::unique_lock lock(mutex_);
  while (!stop_) {
    wake_.wait_for(lock, options_.interval, [this] { return stop_; });
    if (stop_) break;
    lock.unlock();
    CheckDaemon(key, gpu);
    lock.lock();
  }
}

void SharedGpus::CheckDaemon(const std::string& key, Gpu& gpu) {
  // Only a Prepare or Release of this same GPU can hold it, each bounded by the daemon's
  // command time-out.
  std::lock_guard lock(gpu.mutex);
  if (!gpu.daemon) return;
  if (auto check = gpu.daemon->Check(); !check) {
    if (key != gpu.pci) return FaultSlice(key, gpu, check.error().message);
    Fault(key, gpu, check.error().message);
  }
}

void StopShareClientsLocked(Model& model, const GpuRecord& gpu, const std::string& mig_device,
                            const std::string& reason) {
  std::vector<Mutation> mutations;
  for (const auto& holder : gpu.shares) {
    if (!mig_device.empty() && holder.mig_device != mig_device) continue;
    auto it = model.containers.find(holder.container_id);
    if (it == model.containers.end() || fleet::IsTerminal(it->second.state) ||
        it->second.stop_requested)
      continue;
    model.StopContainer(it->second, std::string(sharing::kSharedFaultReason) + ": " + reason,
                        mutations);
  }
  model.Commit(std::move(mutations), nullptr);
}

void SharedGpus::Fault(const std::string& pci, Gpu& gpu, const std::string& reason) {
  spdlog::error("GPU {}: {}: no new shares; stopping its containers; restarting the daemon", pci,
                reason);
  {
    std::lock_guard lock(model_.mu);
    GpuRecord* record = model_.FindGpu(pci);
    if (record) {
      record->share_fault = reason;
      // An MPS server is one fault domain: every client on the GPU met the fault.
      StopShareClientsLocked(model_, *record, "", reason);
    }
  }
  // Back with its limits (the marker last) before the GPU is given again.
  auto restarted = gpu.daemon->Restart();
  std::lock_guard lock(model_.mu);
  GpuRecord* record = model_.FindGpu(pci);
  if (!record) return;
  if (!restarted) {
    record->share_fault = reason + "; restart failed: " + restarted.error().message;
    spdlog::error("GPU {}: {}", pci, record->share_fault);
    return;
  }
  spdlog::info("GPU {}: MPS daemon restarted with its limits; open to shares again", pci);
  record->share_fault.clear();
  model_.reschedule = true;
  model_.scheduler_wake.notify_one();
}

void SharedGpus::WatchLoop() {
  // The samples' times are drawn here and told to no one: a container cannot time its peaks
  // between them.
  std::mt19937_64 random(std::random_device{}());
  std::uniform_real_distribution<double> draw(0.0, 1.0);
  std::unique_lock lock(mutex_);
  while (!stop_) {
    const auto delay = sharing::NextSampleDelay(options_.grace, options_.interval, draw(random));
    wake_.wait_for(lock, delay, [this] { return stop_; });
    if (stop_) break;
    lock.unlock();
    SettleMigSlices();
    Watch();
    lock.lock();
  }
}

void SharedGpus::Watch() {
  if (!options_.measure) return;
  auto processes = options_.measure();
  if (!processes) {
    spdlog::warn("share watchdog: no measurement this round: {}", processes.error().message);
    return;
  }
  const auto used = sharing::SumByContainer(*processes);
  std::map<std::string, uint64_t> limits;
  // Container -> its daemon's key (PCI address or MIG device) and parent, mode.
  struct Where {
    std::string key, pci;
    sharing::Mode mode;
  };
  std::map<std::string, Where> where;
  {
    std::lock_guard lock(model_.mu);
    for (const auto& gpu : model_.gpus) {
      for (const auto& holder : gpu.shares) {
        auto it = model_.containers.find(holder.container_id);
        if (it == model_.containers.end() || it->second.state != ContainerState::kRunning) continue;
        limits[holder.container_id] = holder.share.memory_bytes;
        where[holder.container_id] = {
            holder.mig_device.empty() ? gpu.pci_address : holder.mig_device, gpu.pci_address,
            holder.share.mode};
      }
    }
  }
  const auto breaches = watchdog_.Observe(sharing::Watchdog::Clock::now(), limits, used);
  for (const auto& breach : breaches) {
    const Where& at = where.at(breach.container_id);
    spdlog::warn("container {}: {} (over its share for longer than {} ms)", breach.container_id,
                 breach.reason, watchdog_.grace().count());
    if (at.mode == sharing::Mode::kMps) {
      // MPS ends the client's GPU work first, without touching the other clients.
      Gpu& gpu = GpuOf(at.key, at.pci);
      std::lock_guard lock(gpu.mutex);
      for (const auto& process : *processes) {
        if (process.container_id != breach.container_id || !gpu.daemon) continue;
        if (auto status = gpu.daemon->TerminateClient(process.pid); !status)
          spdlog::warn("container {}: terminate_client {}: {}", breach.container_id, process.pid,
                       status.error().message);
      }
    }
    std::lock_guard lock(model_.mu);
    auto it = model_.containers.find(breach.container_id);
    if (it == model_.containers.end() || fleet::IsTerminal(it->second.state) ||
        it->second.stop_requested)
      continue;
    std::vector<Mutation> mutations;
    model_.StopContainer(it->second, breach.reason, mutations);
    model_.Commit(std::move(mutations), nullptr);
  }
}

}  // namespace tessera::serve

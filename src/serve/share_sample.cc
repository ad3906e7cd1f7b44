// The watchdog's own reading (docs/sharing.md, "The watchdog"): at the moment of each of its
// jittered samples, NVML's process lists of the GPUs that hold shares, each process attributed
// through its cgroup to the share container it runs in. Never the telemetry pass: the pass's
// times are visible to tenants, and the watchdog's must not be.
#include <unordered_map>

#include "serve/measurement.h"

namespace tessera::serve {

Result<std::vector<sharing::ProcessUse>> Measurement::SampleShareProcesses() {
  struct Held {
    std::string pci;
    std::vector<std::string> containers;
  };
  std::vector<Held> held;
  {
    std::lock_guard lock(model_.mu);
    for (const auto& gpu : model_.gpus) {
      if (gpu.shares.empty() || !gpu.node.empty()) continue;
      Held entry{gpu.pci_address, {}};
      for (const auto& holder : gpu.shares)
        entry.containers.push_back(holder.container_id);
      held.push_back(std::move(entry));
    }
  }
  std::vector<sharing::ProcessUse> out;
  if (held.empty()) return out;

  std::lock_guard lock(sample_mu_);
  if (suspended_ > 0) return Unavailable("a GPU reset runs: NVML is closed meanwhile");
  if (!sample_nvml_) {
    auto opened = nvml::Library::Open(model_.options.telemetry.nvml_library);
    if (!opened) return opened.error().WithContext("the watchdog's NVML");
    sample_nvml_ = std::move(*opened);
  }
  std::unordered_map<std::string, std::string> container_of;  // runtime ID -> container ID
  std::unordered_map<std::string, std::string> runtime_ids;
  for (const auto& gpu : held) {
    for (const auto& id : gpu.containers) {
      auto known = sample_runtime_ids_.find(id);
      if (known == sample_runtime_ids_.end()) {
        auto runtime = backend_.RuntimeId(id);
        if (!runtime) continue;  // not started yet: nothing of it runs
        known = sample_runtime_ids_.emplace(id, *runtime).first;
      }
      container_of[known->second] = id;
      runtime_ids.emplace(id, known->second);
    }
  }
  // IDs of containers that hold no share any more are forgotten.
  std::erase_if(sample_runtime_ids_,
                [&](const auto& entry) { return !runtime_ids.count(entry.first); });

  for (const auto& gpu : held) {
    auto handle = sample_nvml_->GpuByPci(gpu.pci);
    if (!handle) return handle.error().WithContext("the watchdog's reading of " + gpu.pci);
    std::vector<std::vector<nvml::ProcessMemory>> lists;
    for (bool mps : {false, true}) {
      auto read = sample_nvml_->ComputeProcesses(*handle, mps);
      if (read.ok()) {
        lists.push_back(std::move(read.value));
      } else if (!mps && read.status == nvml::ReadStatus::kFailed) {
        return Unavailable("the watchdog's reading of " + gpu.pci + ": NVML error " +
                           std::to_string(read.code));
      }
    }
    for (const auto& process : telemetry::MergeProcessLists(lists)) {
      // Read now, while NVML lists the process: a PID is only this process's while it lives.
      auto text = telemetry::ReadProcCgroup(model_.options.telemetry.proc_dir, process.pid);
      if (!text) continue;
      auto container = telemetry::ContainerOfProcCgroup(*text);
      if (!container || container->container_id.empty()) continue;
      auto owner = container_of.find(container->container_id);
      if (owner == container_of.end()) continue;
      out.push_back({process.pid, owner->second, process.used_bytes.value_or(0)});
    }
  }
  return out;
}

}  // namespace tessera::serve

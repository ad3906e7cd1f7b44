// SharedGpus for shares of MIG slices: one MPS daemon per MIG device, what a restart of the
// service left per slice, a fault that reaches only its slice's shares, and the teardown of a
// slice's daemon once its last share is gone.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "nvml/nvml.h"
#include "serve/shared_gpus.h"

namespace tessera::serve {

using fleet::ContainerRecord;
using fleet::GpuRecord;
using fleet::Mutation;

void SharedGpus::LeftoversOfMig(const GpuRecord& gpu, const std::vector<std::string>& existing,
                                std::map<std::string, Leftover>& out) const {
  for (const auto& slice : gpu.mig_slices) {
    const auto holder =
        std::find_if(gpu.shares.begin(), gpu.shares.end(),
                     [&](const fleet::ShareHolder& h) { return h.mig_device == slice.id; });
    if (holder != gpu.shares.end()) {
      auto container = model_.containers.find(holder->container_id);
      if (container == model_.containers.end()) continue;
      if (auto start = StartOfLocked(container->second)) {
        out[slice.id].pci = gpu.pci_address;
        out[slice.id].take_over = std::move(*start);
      }
    } else if (std::binary_search(existing.begin(), existing.end(), slice.id)) {
      out[slice.id].pci = gpu.pci_address;
      out[slice.id].remove_uuid = slice.id;
    }
  }
}

Status SharedGpus::ReleaseMig(const GpuRecord& record) {
  // Every slice's daemon goes with the GPU's lease (the slices' shares are all gone by now).
  Status result = Ok();
  const auto existing = mps::Daemon::Existing(options_.mps.root);
  for (const auto& slice : record.mig_slices) {
    Gpu* gpu = nullptr;
    {
      std::lock_guard lock(mutex_);
      if (auto it = gpus_.find(slice.id); it != gpus_.end()) gpu = it->second.get();
    }
    Status status = Ok();
    if (gpu) {
      std::lock_guard lock(gpu->mutex);
      if (gpu->daemon) {
        status = gpu->daemon->Stop();
        gpu->restored += gpu->daemon->limits_restored();
        gpu->daemon.reset();
      }
    }
    if (status && std::binary_search(existing.begin(), existing.end(), slice.id)) {
      auto nvml = Nvml();
      status = nvml ? mps::Daemon::Remove(options_.mps, **nvml, slice.id, record.pci_address)
                    : Status(nvml.error());
    }
    if (!status && result) result = status;
  }
  return result;
}

void SharedGpus::FaultSlice(const std::string& mig_device, Gpu& gpu, const std::string& reason) {
  spdlog::error(
      "MIG device {} of GPU {}: {}: no new shares there; stopping its containers; "
      "restarting its daemon",
      mig_device, gpu.pci, reason);
  auto mark = [&](const std::string& fault) {
    GpuRecord* record = model_.FindGpu(gpu.pci);
    if (!record) return record;
    for (auto& slice : record->mig_slices)
      if (slice.id == mig_device) slice.share_fault = fault;
    return record;
  };
  {
    std::lock_guard lock(model_.mu);
    if (GpuRecord* record = mark(reason)) {
      // This slice's MPS server is one fault domain: its clients, and no other slice's.
      StopShareClientsLocked(model_, *record, mig_device, reason);
    }
  }
  auto restarted = gpu.daemon->Restart();
  std::lock_guard lock(model_.mu);
  if (!restarted) {
    mark(reason + "; restart failed: " + restarted.error().message);
    spdlog::error("MIG device {}: restart failed: {}", mig_device, restarted.error().message);
    return;
  }
  spdlog::info("MIG device {}: MPS daemon restarted with its limits; open to shares again",
               mig_device);
  mark("");
  model_.reschedule = true;
  model_.scheduler_wake.notify_one();
}

void SharedGpus::SettleMigSlices() {
  // Slices whose last share is gone, by (MIG device, parent's PCI address).
  std::vector<std::pair<std::string, std::string>> idle;
  {
    std::lock_guard lock(model_.mu);
    for (const auto& gpu : model_.gpus) {
      if (!gpu.mig_enabled || !gpu.node.empty()) continue;
      for (const auto& slice : gpu.mig_slices) {
        if (!slice.shared) continue;
        if (std::none_of(gpu.shares.begin(), gpu.shares.end(),
                         [&](const fleet::ShareHolder& h) { return h.mig_device == slice.id; }))
          idle.emplace_back(slice.id, gpu.pci_address);
      }
    }
  }
  if (idle.empty()) return;
  const auto existing = mps::Daemon::Existing(options_.mps.root);
  for (const auto& [device, pci] : idle) {
    // No share is placed on a slice while it waits here (MigShareRoomsOf), so nothing starts a
    // daemon for it meanwhile.
    Status status = Ok();
    {
      Gpu& gpu = GpuOf(device, pci);
      std::lock_guard lock(gpu.mutex);
      if (gpu.daemon) {
        status = gpu.daemon->Stop();
        gpu.restored += gpu.daemon->limits_restored();
        gpu.daemon.reset();
      } else if (std::binary_search(existing.begin(), existing.end(), device)) {
        auto nvml = Nvml();
        status =
            nvml ? mps::Daemon::Remove(options_.mps, **nvml, device, pci) : Status(nvml.error());
      }
    }
    std::lock_guard lock(model_.mu);
    GpuRecord* record = model_.FindGpu(pci);
    if (!record) continue;
    for (auto& slice : record->mig_slices) {
      if (slice.id != device) continue;
      if (!status) {
        slice.share_fault = "sharing teardown: " + status.error().message;
        spdlog::error("MIG device {}: {}", device, slice.share_fault);
        continue;
      }
      spdlog::info("MIG device {}: its last share is gone; its MPS daemon torn down", device);
      slice.shared = false;
      slice.share_fault.clear();
    }
    model_.reschedule = true;
    model_.scheduler_wake.notify_one();
  }
}

}  // namespace tessera::serve

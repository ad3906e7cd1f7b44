// GPU faults on the resource manager: which advertised devices a fault takes out, and the IDs
// kubelet knows them by. The decision itself (classification, recovery) is the health module's;
// fault_keeper.cc drives it.
#include "deviceplugin/deviceplugin.h"

namespace tessera::deviceplugin {
namespace {

// A fault contained to one GPU instance touches that instance's MIG devices alone; a GPU
// advertised whole holds every context on it, so it is touched either way.
bool FaultTouches(const PhysicalDevice& device, const std::string& pci_address,
                  uint32_t gpu_instance_id) {
  if (device.pci_address != pci_address) return false;
  if (gpu_instance_id == health::kWholeGpu || !device.mig) return true;
  return device.gpu_instance_id == gpu_instance_id;
}

}  // namespace

bool ResourceManager::SetFault(const std::string& pci_address, uint32_t gpu_instance_id,
                               const std::string& reason) {
  std::lock_guard lock(mutex_);
  bool changed = false;
  for (size_t i = 0; i < devices_.size(); ++i) {
    if (!FaultTouches(devices_[i], pci_address, gpu_instance_id) || fault_[i] == reason) continue;
    fault_[i] = reason;
    changed = true;
  }
  if (changed) BumpLocked();
  return changed;
}

bool ResourceManager::ClearFault(const std::string& pci_address) {
  std::lock_guard lock(mutex_);
  bool changed = false;
  for (size_t i = 0; i < devices_.size(); ++i) {
    if (devices_[i].pci_address != pci_address || fault_[i].empty()) continue;
    fault_[i].clear();
    changed = true;
  }
  if (changed) BumpLocked();
  return changed;
}

std::vector<std::pair<std::string, std::string>> ResourceManager::AdvertisedIds(
    const std::string& pci_address, uint32_t gpu_instance_id) const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& resource : resources_) {
    for (const auto& [id, index] : resource.device_of_id) {
      if (FaultTouches(devices_[index], pci_address, gpu_instance_id))
        out.emplace_back(resource.name, id);
    }
  }
  return out;
}

}  // namespace tessera::deviceplugin

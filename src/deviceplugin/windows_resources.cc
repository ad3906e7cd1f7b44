// Windows nodes: the same resource manager and kubelet server, with DirectX adapters from a host
// snapshot instead of the PCI inventory (process isolation), or the host's dismounted GPUs
// (Hyper-V isolation). Discovery and Allocate outputs come from src/windows; this file only maps
// them onto Resources and ContainerAllocations.
#include <algorithm>
#include <set>

#include "deviceplugin/deviceplugin.h"
#include "windows/windows.h"

namespace tessera::deviceplugin {

struct ResourceManager::WindowsNode {
  windows::Snapshot snapshot;
  windows::PluginInventory inventory;
  windows::VendorFiles vendor_files = windows::DefaultVendorFiles();
  bool hyperv = false;  // dismounted GPUs for Hyper-V-isolated containers
};

namespace {

// The location path is the stable ID on Windows (LUIDs change every boot); health and leases key
// on it as Linux keys on the PCI address.
PhysicalDevice WindowsPhysicalDevice(const windows::Snapshot& snapshot,
                                     const windows::PluginDevice& plugin_device, bool hyperv) {
  PhysicalDevice device;
  device.id = plugin_device.location_path;
  device.pci_address = plugin_device.location_path;
  if (hyperv) {
    const windows::PciAdapter& adapter =
        snapshot.hyperv_facts->pci_adapters[plugin_device.adapter_index];
    device.model = adapter.description;
  } else {
    const windows::Adapter& adapter = snapshot.adapters[plugin_device.adapter_index];
    device.model = adapter.description;
    device.vendor_id = adapter.vendor_id;
    device.driver = adapter.driver_service;
  }
  return device;
}

// The CopyToVm* values Allocate would reject, over every advertised device.
std::set<std::string> RuntimeFileProblems(const windows::Snapshot& snapshot,
                                          const windows::PluginInventory& inventory,
                                          const windows::VendorFiles& vendor_files) {
  std::set<std::string> problems;
  for (const auto& plugin_resource : inventory.resources) {
    for (const auto& plugin_device : plugin_resource.devices) {
      auto planned = windows::Allocate(snapshot, inventory, {plugin_device.id}, vendor_files);
      if (planned) problems.insert(planned->problems.begin(), planned->problems.end());
    }
  }
  return problems;
}

}  // namespace

Result<std::unique_ptr<ResourceManager>> ResourceManager::CreateForWindows(
    const windows::Snapshot& snapshot, const Config& config) {
  if (auto s = ValidateConfig(config); !s) return s.error();
  if (config.windows_replicas < 1 || config.windows_replicas > 64) {
    return InvalidArgument("windows replicas: " + std::to_string(config.windows_replicas) +
                           " is out of range (1..64)");
  }
  auto isolation = windows::ParseIsolation(config.windows_isolation);
  if (!isolation) return isolation.error().WithContext("windows isolation");
  bool hyperv = *isolation == windows::Isolation::kHyperV;
  if (hyperv && config.windows_replicas != 1) {
    return InvalidArgument(
        "windows replicas: a GPU assigned to a Hyper-V-isolated container "
        "goes whole to one container (replicas must be 1)");
  }
  auto inventory = hyperv ? windows::BuildHyperVPluginInventory(snapshot)
                          : windows::BuildPluginInventory(snapshot, config.windows_replicas);
  if (!inventory) return inventory.error().WithContext("windows snapshot");

  std::unique_ptr<ResourceManager> manager(new ResourceManager());
  manager->config_ = config;
  auto node = std::make_shared<WindowsNode>();
  node->snapshot = snapshot;
  node->inventory = *inventory;
  node->hyperv = hyperv;
  for (const auto& skipped : inventory->skipped)
    manager->warnings_.push_back("adapter not advertised: " + skipped);

  std::map<std::string, int> device_of_location;
  for (const auto& plugin_resource : inventory->resources) {
    Resource resource;
    resource.name = plugin_resource.name;
    resource.replicas = config.windows_replicas;
    resource.socket_name = ResourceSocketName(resource.name);
    for (const auto& plugin_device : plugin_resource.devices) {
      auto [it, fresh] = device_of_location.emplace(plugin_device.location_path,
                                                    static_cast<int>(manager->devices_.size()));
      if (fresh)
        manager->devices_.push_back(WindowsPhysicalDevice(snapshot, plugin_device, hyperv));
      if (std::find(resource.devices.begin(), resource.devices.end(), it->second) ==
          resource.devices.end()) {
        resource.devices.push_back(it->second);
      }
      resource.ids.push_back(plugin_device.id);
      resource.device_of_id[plugin_device.id] = it->second;
    }
    manager->resources_.push_back(std::move(resource));
  }
  std::sort(manager->resources_.begin(), manager->resources_.end(),
            [](const Resource& a, const Resource& b) { return a.name < b.name; });
  // Rejected CopyToVm* values are the same on every Allocate: report them once, at start. (A
  // Hyper-V-isolated container mounts no runtime files.)
  std::set<std::string> problems;
  if (!hyperv) problems = RuntimeFileProblems(snapshot, node->inventory, node->vendor_files);
  for (const auto& problem : problems)
    manager->warnings_.push_back("runtime files: " + problem);
  manager->windows_ = std::move(node);
  manager->present_.assign(manager->devices_.size(), true);
  manager->fault_.assign(manager->devices_.size(), "");
  manager->lease_.assign(manager->devices_.size(), std::nullopt);
  return manager;
}

Result<ContainerAllocation> ResourceManager::AllocateWindows(
    const std::vector<std::string>& ids) const {
  auto planned =
      windows_->hyperv
          ? windows::AllocateHyperV(windows_->snapshot, windows_->inventory, ids)
          : windows::Allocate(windows_->snapshot, windows_->inventory, ids, windows_->vendor_files);
  if (!planned) return InvalidArgument(planned.error().message);
  ContainerAllocation out;
  for (const auto& device : planned->devices) {
    out.devices.push_back({device.container_path, device.host_path, device.permissions});
  }
  for (const auto& mount : planned->mounts) {
    out.mounts.push_back({mount.container_path, mount.host_path, mount.read_only});
  }
  return out;
}

}  // namespace tessera::deviceplugin

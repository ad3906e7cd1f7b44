// Device nodes with their numbers from kernel metadata: /proc/devices for driver majors,
// /proc/driver/nvidia/gpus/<bdf>/information for NVIDIA minors, and sysfs `dev` files for DRM,
// KFD, VFIO and iommufd. Nodes are reported even when /dev lacks them (nvidia-modprobe creates
// them lazily); `exists` says whether the file is there.
#include <algorithm>

#include "inventory/parsers.h"
#include "inventory/readers.h"

namespace tessera::inventory {
namespace {

// Kernel facts (NVIDIA kernel module): nvidiactl is minor 255 and nvidia-modeset minor 254 of
// the frontend major; nvidia-uvm-tools is minor 1 of the nvidia-uvm major.
constexpr uint32_t kNvidiaCtlMinor = 255;
constexpr uint32_t kNvidiaModesetMinor = 254;
constexpr uint32_t kNvidiaUvmToolsMinor = 1;

DeviceNode MakeNode(const HostRoot& host, std::string path, uint32_t major, uint32_t minor) {
  DeviceNode node;
  node.exists = host.Exists(path);
  node.path = std::move(path);
  node.major = major;
  node.minor = minor;
  return node;
}

// Reads a sysfs `dev` file ("major:minor"); warning naming the file on failure.
std::optional<std::pair<uint32_t, uint32_t>> ReadDev(const HostRoot& host, const std::string& path,
                                                     std::vector<std::string>& warnings) {
  auto text = host.ReadAttribute(path);
  if (!text) {
    warnings.push_back(text.error().message);
    return std::nullopt;
  }
  auto numbers = ParseDevNumbers(*text);
  if (!numbers) {
    warnings.push_back(path + ": " + numbers.error().message);
    return std::nullopt;
  }
  return *numbers;
}

bool StartsWith(const std::string& text, std::string_view prefix) {
  return text.compare(0, prefix.size(), prefix) == 0;
}

bool IsDrmNodeName(const std::string& name) {
  std::string_view digits;
  if (StartsWith(name, "card"))
    digits = std::string_view(name).substr(4);
  else if (StartsWith(name, "renderD"))
    digits = std::string_view(name).substr(7);
  else
    return false;
  return !digits.empty() &&
         std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
}

PciDevice* FindMutable(Inventory& inventory, const std::string& address) {
  for (auto& device : inventory.devices) {
    if (device.pci_address == address) return &device;
  }
  return nullptr;
}

void AttachNvidia(const HostRoot& host, Inventory& inventory,
                  const std::map<std::string, uint32_t>& majors, bool have_majors) {
  std::optional<uint32_t> frontend;
  for (const char* name : {"nvidia-frontend", "nvidia"}) {
    auto it = majors.find(name);
    if (it != majors.end()) {
      frontend = it->second;
      break;
    }
  }
  bool any_nvidia = false;
  for (PciDevice& device : inventory.devices) {
    if (device.driver != "nvidia") continue;
    any_nvidia = true;
    std::string path = "/proc/driver/nvidia/gpus/" + device.pci_address + "/information";
    auto text = host.ReadFile(path);
    if (!text) {
      device.warnings.push_back(text.error().message + " (bound to nvidia but no proc entry)");
      continue;
    }
    auto info = ParseNvidiaGpuInformation(*text);
    if (!info) {
      device.warnings.push_back(path + ": " + info.error().message);
      continue;
    }
    device.gpu_uuid = info->uuid;
    if (!info->model.empty()) device.product_name = info->model;
    device.nvidia_minor = info->device_minor;
    if (!frontend) {
      device.warnings.push_back("/proc/devices: no nvidia-frontend major; /dev/nvidia" +
                                std::to_string(*info->device_minor) + " left out");
      continue;
    }
    device.device_nodes.push_back(MakeNode(host,
                                           "/dev/nvidia" + std::to_string(*info->device_minor),
                                           *frontend, static_cast<uint32_t>(*info->device_minor)));
  }
  if (!any_nvidia && !host.Exists("/proc/driver/nvidia")) return;
  if (!have_majors) return;

  auto& shared = inventory.shared_device_nodes;
  if (frontend) {
    shared.push_back({"nvidiactl", MakeNode(host, "/dev/nvidiactl", *frontend, kNvidiaCtlMinor)});
    if (host.Exists("/sys/module/nvidia_modeset") || host.Exists("/dev/nvidia-modeset")) {
      shared.push_back({"nvidia-modeset",
                        MakeNode(host, "/dev/nvidia-modeset", *frontend, kNvidiaModesetMinor)});
    }
  }
  if (auto uvm = majors.find("nvidia-uvm"); uvm != majors.end()) {
    shared.push_back({"nvidia-uvm", MakeNode(host, "/dev/nvidia-uvm", uvm->second, 0)});
    shared.push_back({"nvidia-uvm-tools",
                      MakeNode(host, "/dev/nvidia-uvm-tools", uvm->second, kNvidiaUvmToolsMinor)});
  }
  if (auto caps = majors.find("nvidia-caps"); caps != majors.end()) {
    for (const char* cap : {"config", "monitor"}) {
      std::string path = std::string("/proc/driver/nvidia/capabilities/mig/") + cap;
      auto text = host.ReadFile(path);
      if (!text) continue;  // MIG capabilities exist only on MIG-capable drivers/GPUs
      auto minor = ParseNvidiaCapabilityMinor(*text);
      if (!minor) {
        inventory.warnings.push_back(path + ": " + minor.error().message);
        continue;
      }
      shared.push_back(
          {"nvidia-caps", MakeNode(host, "/dev/nvidia-caps/nvidia-cap" + std::to_string(*minor),
                                   caps->second, *minor)});
    }
  }
}

void AttachDrm(const HostRoot& host, Inventory& inventory) {
  auto names = host.ListDirectory("/sys/class/drm");
  if (!names) return;  // no DRM at all is normal on compute-only hosts
  for (const std::string& name : *names) {
    if (!IsDrmNodeName(name)) continue;
    std::string dir = "/sys/class/drm/" + name;
    auto device_dir = host.ResolveLink(dir + "/device");
    if (!device_dir) continue;  // virtual DRM devices (vkms) have no PCI parent
    std::string address = BaseName(*device_dir);
    PciDevice* device = FindMutable(inventory, address);
    if (!device) continue;
    if (auto numbers = ReadDev(host, dir + "/dev", device->warnings)) {
      device->device_nodes.push_back(
          MakeNode(host, "/dev/dri/" + name, numbers->first, numbers->second));
    }
  }
}

void AttachKfd(const HostRoot& host, Inventory& inventory) {
  bool any_amdgpu = std::any_of(inventory.devices.begin(), inventory.devices.end(),
                                [](const PciDevice& d) { return d.driver == "amdgpu"; });
  if (!any_amdgpu || !host.Exists("/sys/class/kfd/kfd/dev")) return;
  if (auto numbers = ReadDev(host, "/sys/class/kfd/kfd/dev", inventory.warnings)) {
    inventory.shared_device_nodes.push_back(
        {"kfd", MakeNode(host, "/dev/kfd", numbers->first, numbers->second)});
  }
}

void AttachVfio(const HostRoot& host, Inventory& inventory) {
  bool any_vfio = std::any_of(inventory.devices.begin(), inventory.devices.end(),
                              [](const PciDevice& d) { return d.driver == "vfio-pci"; });
  if (!any_vfio) return;
  if (host.Exists("/sys/class/misc/vfio/dev")) {
    if (auto numbers = ReadDev(host, "/sys/class/misc/vfio/dev", inventory.warnings)) {
      inventory.shared_device_nodes.push_back(
          {"vfio", MakeNode(host, "/dev/vfio/vfio", numbers->first, numbers->second)});
    }
  }
  if (host.Exists("/sys/class/misc/iommu/dev")) {
    if (auto numbers = ReadDev(host, "/sys/class/misc/iommu/dev", inventory.warnings)) {
      inventory.shared_device_nodes.push_back(
          {"iommufd", MakeNode(host, "/dev/iommu", numbers->first, numbers->second)});
    }
  }
  for (PciDevice& device : inventory.devices) {
    if (device.driver != "vfio-pci") continue;
    if (device.iommu_group) {
      std::string group = std::to_string(*device.iommu_group);
      std::string dev_file = "/sys/class/vfio/" + group + "/dev";
      if (host.Exists(dev_file)) {
        if (auto numbers = ReadDev(host, dev_file, device.warnings)) {
          device.device_nodes.push_back(
              MakeNode(host, "/dev/vfio/" + group, numbers->first, numbers->second));
        }
      } else {
        device.warnings.push_back(dev_file + ": missing for a vfio-pci device's group");
      }
    } else {
      device.warnings.push_back("bound to vfio-pci without an IOMMU group");
    }
    // iommufd character devices (kernel ≥6.2): <device>/vfio-dev/vfioN/dev.
    std::string cdev_dir = "/sys/bus/pci/devices/" + device.pci_address + "/vfio-dev";
    if (auto names = host.ListDirectory(cdev_dir)) {
      for (const auto& name : *names) {
        if (!StartsWith(name, "vfio")) continue;
        if (auto numbers = ReadDev(host, cdev_dir + "/" + name + "/dev", device.warnings)) {
          device.device_nodes.push_back(
              MakeNode(host, "/dev/vfio/devices/" + name, numbers->first, numbers->second));
        }
      }
    }
  }
}

}  // namespace

void AttachDeviceNodes(const HostRoot& host, Inventory& inventory) {
  std::map<std::string, uint32_t> majors;
  bool have_majors = false;
  bool needs_majors = std::any_of(inventory.devices.begin(), inventory.devices.end(),
                                  [](const PciDevice& d) { return d.driver == "nvidia"; });
  if (auto text = host.ReadFile("/proc/devices")) {
    auto parsed = ParseProcDevices(*text);
    if (parsed) {
      majors = std::move(*parsed);
      have_majors = true;
    } else {
      inventory.warnings.push_back("/proc/devices: " + parsed.error().message);
    }
  } else if (needs_majors) {
    inventory.warnings.push_back(text.error().message);
  }
  AttachNvidia(host, inventory, majors, have_majors);
  AttachDrm(host, inventory);
  AttachKfd(host, inventory);
  AttachVfio(host, inventory);
  for (PciDevice& device : inventory.devices) {
    std::sort(device.device_nodes.begin(), device.device_nodes.end(),
              [](const DeviceNode& a, const DeviceNode& b) { return a.path < b.path; });
  }
}

}  // namespace tessera::inventory

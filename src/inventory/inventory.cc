// Composes the readers into one Inventory value.
#include "inventory/inventory.h"

#include <sys/stat.h>

#include <cstdlib>

#include "inventory/parsers.h"
#include "inventory/readers.h"

namespace tessera::inventory {

const char* DeviceKindName(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kGpu:
      return "gpu";
    case DeviceKind::kAccelerator:
      return "accelerator";
    case DeviceKind::kNvSwitch:
      return "nvswitch";
    case DeviceKind::kCompanion:
      return "companion";
  }
  return "gpu";
}

std::string HostPath(const std::string& root, const std::string& path) {
  if (root.empty() || root == "/") return path;
  std::string base = root;
  while (!base.empty() && base.back() == '/')
    base.pop_back();
  return base + path;
}

std::string DefaultNvmlLibrary(const std::string& root) {
  return root.empty() || root == "/" ? "libnvidia-ml.so.1" : "";
}

const PciDevice* Inventory::FindDevice(const std::string& pci_address) const {
  for (const auto& device : devices) {
    if (device.pci_address == pci_address) return &device;
  }
  return nullptr;
}

std::vector<const PciDevice*> Inventory::Gpus() const {
  std::vector<const PciDevice*> gpus;
  for (const auto& device : devices) {
    if (device.kind == DeviceKind::kGpu) gpus.push_back(&device);
  }
  return gpus;
}

namespace {

std::string HexId(uint16_t id) {
  static const char kHex[] = "0123456789abcdef";
  return {kHex[(id >> 12) & 15], kHex[(id >> 8) & 15], kHex[(id >> 4) & 15], kHex[id & 15]};
}

void NameDevices(const HostRoot& host, Inventory& inventory) {
  if (inventory.devices.empty()) return;  // pci.ids is 1.3 MB: read it only when needed
  std::optional<std::string> ids;
  for (const char* path : {"/usr/share/misc/pci.ids", "/usr/share/hwdata/pci.ids"}) {
    auto text = host.ReadFile(path, 16 << 20);
    if (text) {
      ids = std::move(*text);
      break;
    }
  }
  for (PciDevice& device : inventory.devices) {
    PciNames names;
    if (ids) names = LookupPciIds(*ids, device.vendor_id, device.device_id);
    device.vendor_name = names.vendor;
    device.model = names.device.empty() ? HexId(device.vendor_id) + ":" + HexId(device.device_id)
                                        : names.device;
  }
}

// The default NVML name for root "/" is resolved by this process's loader; where the driver's
// files live off its path (a cache built before their mount), the library the driver search
// found is opened by its path instead.
std::string NvmlLibraryToOpen(const Inventory& inventory, const std::string& requested) {
  if (requested != "libnvidia-ml.so.1" || !inventory.nvidia_driver) return requested;
  for (const auto& library : inventory.nvidia_driver->libraries) {
    if (library.soname == requested && !IsLoaderDefaultDirectory(DirName(library.soname_link)))
      return library.soname_link;
  }
  return requested;
}

}  // namespace

Result<Inventory> ReadInventory(const ReadOptions& options) {
  struct stat st;
  if (::stat(options.root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return InvalidArgument("host root " + options.root + ": not a directory");
  }
  HostRoot host(options.root);
  Inventory inventory;
  inventory.root = options.root;
  PciWalk walk = WalkPci(host, inventory.warnings);
  inventory.devices = std::move(walk.devices);
  inventory.iommu_groups = std::move(walk.iommu_groups);
  if (options.read_pci_ids) {
    NameDevices(host, inventory);
  } else {
    for (PciDevice& device : inventory.devices) {
      device.model = HexId(device.vendor_id) + ":" + HexId(device.device_id);
    }
  }
  AttachDeviceNodes(host, inventory);
  if (options.read_driver_files) {
    const bool own_root = options.root.empty() || options.root == "/";
    auto own = [&](const char* name) {
      const char* value = own_root ? std::getenv(name) : nullptr;
      return std::string(value ? value : "");
    };
    DriverSearch search;
    search.library_path = SplitSearchPath(options.library_path.value_or(own("LD_LIBRARY_PATH")));
    search.program_path = SplitSearchPath(options.program_path.value_or(own("PATH")));
    inventory.nvidia_driver = ReadNvidiaDriver(host, search, inventory.warnings);
  }
  AttachMig(host, inventory, NvmlLibraryToOpen(inventory, options.nvml_library));
  return inventory;
}

}  // namespace tessera::inventory

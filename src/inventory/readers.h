// The host readers the inventory is composed of. Each gathers bytes through HostRoot and hands
// them to the pure parsers in parsers.h; problems become warnings, never exceptions or crashes.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "inventory/host_root.h"
#include "inventory/inventory.h"

namespace tessera::inventory {

// Walks /sys/bus/pci/devices and returns the functions tessera cares about (GPUs, accelerators,
// NVSwitches and their companions), sorted by address, with their IOMMU groups.
struct PciWalk {
  std::vector<PciDevice> devices;
  std::map<int, IommuGroup> iommu_groups;
};
PciWalk WalkPci(const HostRoot& host, std::vector<std::string>& warnings);

// Classifies a function from its vendor and 24-bit class code; nullopt when it is not ours.
std::optional<DeviceKind> ClassifyPciFunction(uint16_t vendor_id, uint32_t class_code);

// Fills per-device nodes (NVIDIA, DRM, VFIO) and the shared nodes of the driver stacks.
void AttachDeviceNodes(const HostRoot& host, Inventory& inventory);

// MIG state of each NVIDIA GPU: capability minors from procfs, and from NVML (when
// `nvml_library` is not empty) the mode, profiles, placements, UUIDs and sizes. NVML's start
// (nvmlInit attaches every GPU) is the costly part of a read, so it is loaded only when some GPU
// may have MIG state: its board is MIG-capable, or procfs lists MIG instances on it.
void AttachMig(const HostRoot& host, Inventory& inventory, const std::string& nvml_library);

// Whether an NVIDIA PCI device ID belongs to a GPU family with MIG (GA100, GH100, GB100).
bool MigCapableBoard(uint16_t device_id);

// The directories the host's dynamic loader searches besides ld.so.cache, in its order:
// `library_path` (LD_LIBRARY_PATH), those /etc/ld.so.conf names (with its includes), then its
// built-in ones; each once.
std::vector<std::string> LoaderDirectories(const HostRoot& host,
                                           const std::vector<std::string>& library_path,
                                           std::vector<std::string>& warnings);

// The NVIDIA driver's version and user-space files; nullopt when no NVIDIA driver is loaded.
// Libraries are found as the loader finds them: through ld.so.cache and in LoaderDirectories;
// programs in `program_path` (PATH) and the usual bin directories.
struct DriverSearch {
  std::vector<std::string> library_path;  // LD_LIBRARY_PATH's directories
  std::vector<std::string> program_path;  // PATH's directories
};
std::optional<NvidiaDriver> ReadNvidiaDriver(const HostRoot& host, const DriverSearch& search,
                                             std::vector<std::string>& warnings);

}  // namespace tessera::inventory

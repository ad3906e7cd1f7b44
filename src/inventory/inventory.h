// The node inventory: every GPU, accelerator and NVSwitch on a host, as plain values.
//
// This module is the only one that reads the host. Everything downstream (cdi, deviceplugin,
// topology, fleet) takes an Inventory value, so it can be tested from a fixture tree or a JSON
// snapshot on a machine without GPUs. All reads go through a host root (default "/"), so
// `<root>/sys`, `<root>/proc`, `<root>/dev` and `<root>/etc/ld.so.cache` can be a fixture tree.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"

namespace tessera::inventory {

// What a PCI function is to tessera.
enum class DeviceKind {
  kGpu,          // class 0x0300xx (VGA), 0x0302xx (3D), 0x0380xx (other display)
  kAccelerator,  // class 0x1200xx (processing accelerator)
  kNvSwitch,     // NVIDIA (0x10de) bridge class 0x0680xx
  kCompanion,    // shares an NVSwitch's IOMMU group or slot (e.g. PMC-Sierra 11f8:4128)
};
const char* DeviceKindName(DeviceKind kind);  // "gpu", "accelerator", "nvswitch", "companion"

// A character or block device node with its numbers as the kernel reports them.
struct DeviceNode {
  std::string path;  // container-visible path, e.g. "/dev/nvidia0" (the host path under root)
  uint32_t major = 0;
  uint32_t minor = 0;
  char type = 'c';      // 'c' character, 'b' block
  bool exists = false;  // the node file is present under <root>/dev

  friend bool operator==(const DeviceNode&, const DeviceNode&) = default;
};

// One PCI base address register with a non-zero size, from the `resource` file.
struct Bar {
  int index = 0;       // 0..5, 6 = expansion ROM
  uint64_t start = 0;  // physical address
  uint64_t size = 0;   // bytes
  uint64_t flags = 0;  // IORESOURCE_* flags as printed by the kernel
  bool is_64bit_prefetchable() const { return (flags & 0x2000) && (flags & 0x100000); }
};

struct PcieLink {
  std::string current_speed;  // as sysfs prints it, e.g. "32.0 GT/s PCIe"
  int current_width = 0;
  std::string max_speed;
  int max_width = 0;
};

// One MIG device of an NVIDIA GPU: a compute instance (CI) inside a GPU instance (GI). A
// container needs the parent's /dev/nvidia<minor> plus both capability nodes.
struct MigPlacement {
  uint32_t start = 0;  // first memory slice
  uint32_t size = 0;   // memory slices covered
  friend bool operator==(const MigPlacement&, const MigPlacement&) = default;
};

struct MigDevice {
  uint32_t index = 0;  // NVML's MIG handle index (nvidia-ctk's <mig> in "<gpu>:<mig>")
  uint32_t gpu_instance_id = 0;
  uint32_t compute_instance_id = 0;
  // From NVML; empty / nullopt / 0 when NVML could not be asked.
  std::string profile;                 // "1g.10gb", "1g.10gb+me", "1c.3g.40gb"
  std::optional<uint32_t> profile_id;  // nvidia-smi's GPU instance profile ID (19 = 1g.10gb)
  std::optional<MigPlacement> placement;
  std::string uuid;  // "MIG-…"
  uint64_t memory_bytes = 0;
  uint32_t multiprocessors = 0;
  // /dev/nvidia-caps/nvidia-cap<N> of the GI and of the CI (minors from procfs); absent when
  // procfs has no capability file for the instance.
  std::optional<DeviceNode> gpu_instance_node;
  std::optional<DeviceNode> compute_instance_node;
};

struct MigState {
  // nullopt = unknown (NVML could not be asked).
  std::optional<bool> enabled;
  std::optional<bool> pending;
  std::vector<MigDevice> devices;  // by GI then CI
};

struct PciDevice {
  std::string pci_address;  // canonical "0000:18:00.0", lowercase hex
  uint16_t vendor_id = 0;
  uint16_t device_id = 0;
  uint16_t subsystem_vendor_id = 0;
  uint16_t subsystem_device_id = 0;
  uint32_t class_code = 0;  // 24-bit class/subclass/prog-if
  uint8_t revision = 0;
  DeviceKind kind = DeviceKind::kGpu;
  std::string vendor_name;  // from pci.ids, else empty
  std::string model;        // from pci.ids, else "10de:2330"
  std::string driver;       // bound driver's name, empty when none
  std::optional<int> iommu_group;
  int numa_node = -1;  // -1 = unknown / single node
  std::vector<Bar> bars;
  std::optional<PcieLink> link;
  // PCI addresses of the bridges above this device, nearest first (root port last).
  std::vector<std::string> upstream_bridges;
  std::vector<DeviceNode> device_nodes;  // nodes that belong to this device alone
  // NVIDIA, from /proc/driver/nvidia/gpus/<bdf>/information when the nvidia driver owns it.
  std::optional<std::string> gpu_uuid;
  // The driver's name for the board ("NVIDIA H100 80GB HBM3": procfs "Model:"), as nvidia-smi
  // names it; pci.ids' `model` names the chip.
  std::optional<std::string> product_name;
  // From NVML, when it was consulted (MIG-capable boards, root "/"): the whole memory in bytes
  // and the module ID on its baseboard (HGX: 1..8).
  std::optional<uint64_t> memory_bytes;
  std::optional<uint32_t> module_id;
  std::optional<int> nvidia_minor;
  // NVIDIA GPUs that support MIG (NVML says so, or procfs lists MIG instances).
  std::optional<MigState> mig;
  std::vector<std::string> warnings;  // "<file>: <problem>" for partial or bad input

  bool is_nvidia() const { return vendor_id == 0x10de; }
  bool is_amd() const { return vendor_id == 0x1002; }
  bool is_intel() const { return vendor_id == 0x8086; }
};

struct IommuGroup {
  int number = 0;
  std::vector<std::string> members;  // every PCI function in the group, sorted
};

// Device nodes shared by all devices of a driver stack.
struct SharedDeviceNode {
  std::string role;  // "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset",
                     // "nvidia-caps", "kfd", "vfio", "iommufd"
  DeviceNode node;
};

// A driver library found through ld.so.cache, with the SONAME link that points at it.
struct DriverLibrary {
  std::string path;         // real file, e.g. /usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06
  std::string soname;       // e.g. libcuda.so.1 (empty if no link was found)
  std::string soname_link;  // e.g. /usr/lib/x86_64-linux-gnu/libcuda.so.1
  std::string arch;         // "x86_64", "i386", "aarch64" (from the ld.so.cache flags)
};

struct NvidiaDriver {
  std::string version;  // e.g. "580.65.06"
  std::vector<DriverLibrary> libraries;
  std::vector<std::string> binaries;     // absolute paths on the host
  std::vector<std::string> firmware;     // GSP firmware files
  std::vector<std::string> ipc_sockets;  // present sockets only
};

struct Inventory {
  std::string root;                        // host root it was read from
  std::vector<PciDevice> devices;          // sorted by pci_address
  std::map<int, IommuGroup> iommu_groups;  // groups that contain at least one listed device
  std::vector<SharedDeviceNode> shared_device_nodes;
  std::optional<NvidiaDriver> nvidia_driver;
  std::vector<std::string> warnings;  // host-level problems (unreadable dirs, bad ld.so.cache)

  const PciDevice* FindDevice(const std::string& pci_address) const;
  std::vector<const PciDevice*> Gpus() const;  // kind == kGpu, in PCI order
};

struct ReadOptions {
  std::string root = "/";
  bool read_pci_ids = true;       // resolve names from <root>/usr/share/misc/pci.ids
  bool read_driver_files = true;  // ld.so.cache, binaries, firmware
  // NVML to dlopen for MIG facts (profiles, UUIDs, sizes, mode); empty = procfs only. NVML
  // describes the machine this process runs on, so it is meant for root "/" only.
  std::string nvml_library;
  // How the host's dynamic loader and shell find the driver's files besides ld.so.cache and the
  // usual directories: its LD_LIBRARY_PATH and PATH values (paths inside the root). nullopt:
  // this process's own for root "/", none for any other root.
  std::optional<std::string> library_path;
  std::optional<std::string> program_path;
};

// The NVML library `tessera inventory` uses for a root: libnvidia-ml.so.1 for "/", none for a
// fixture tree or another host's root.
std::string DefaultNvmlLibrary(const std::string& root);

// Whether the dynamic loader searches `dir` ("/usr/lib/x86_64-linux-gnu") without being told to:
// glibc's built-in directories. Libraries elsewhere are found in a container only when its
// loader is told where they are.
bool IsLoaderDefaultDirectory(const std::string& dir);

// Reads the host under `options.root`. Fails only when the root itself is unusable; every
// per-device problem becomes a warning on that device.
Result<Inventory> ReadInventory(const ReadOptions& options);

// Stable JSON (schema in docs/inventory-schema.md) and back. FromJson validates field types
// and names the offending field on error.
std::string ToJson(const Inventory& inventory, int indent = 2);
Result<Inventory> FromJson(const std::string& text);

// Human-readable table for `tessera inventory --format table`.
std::string ToTable(const Inventory& inventory);

// Paths in an Inventory are as the host sees them with root "/" (what a container sees too).
// This gives the path this process must open: "<root><path>" ("/dev/nvidia0" under a fixture
// root "/tmp/hgx" is "/tmp/hgx/dev/nvidia0").
std::string HostPath(const std::string& root, const std::string& path);

// The expansion (option) ROM of the PCI device `pci_address` ("0000:18:00.0") under `root`,
// from sysfs `rom`; nullopt when the device has none. The kernel hides the ROM until "1" is
// written to that file and "0" hides it again (Documentation/ABI/testing/sysfs-bus-pci), so on
// sysfs this writes both; a fixture tree's plain file is only read. NotFound when the device
// itself is not there.
Result<std::optional<std::string>> ReadOptionRom(const std::string& root,
                                                 const std::string& pci_address);

}  // namespace tessera::inventory

// This node's devices as the DRA driver publishes them: names, attributes and the CDI edits of
// each GPU, computed once per inventory (the CDI builder runs here, not on every prepare).
#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "dra/dra.h"
#include "dra/partitionable.h"

namespace tessera::dra {
namespace {

using inventory::PciDevice;

// The CDI builder's stable name of a GPU (UUID, else PCI address), or the IOMMU group's name
// when several GPUs share a group in vfio mode (build.cc, Vfio()).
std::vector<std::string> CdiNamesFor(const PciDevice& gpu) {
  std::vector<std::string> names;
  if (gpu.gpu_uuid && !gpu.gpu_uuid->empty()) names.push_back(*gpu.gpu_uuid);
  names.push_back(gpu.pci_address);
  if (gpu.iommu_group) names.push_back("iommu-group-" + std::to_string(*gpu.iommu_group));
  return names;
}

std::optional<cdi::Mode> ModeOf(const PciDevice& gpu, cdi::Mode wanted) {
  if (wanted == cdi::Mode::kDriver || wanted == cdi::Mode::kVfio) return wanted;
  if (gpu.driver == "nvidia") return cdi::Mode::kDriver;
  if (gpu.driver == "vfio-pci") return cdi::Mode::kVfio;
  return std::nullopt;
}

// The MIG devices of `gpu` (whose whole-GPU entry is `parent`), with the CDI edits of the device
// the builder names "<gpu>:<mig>" / "MIG-<uuid>": the parent's node plus both capability nodes.
void AddMigDevices(const PciDevice& gpu, const NodeDevice& parent, const cdi::Spec& spec,
                   NodeDevices& node) {
  for (const inventory::MigDevice& mig : gpu.mig->devices) {
    std::string index_suffix = ":" + std::to_string(mig.index);
    const cdi::Device* cdi_device = nullptr;
    for (const auto& candidate : spec.devices) {
      bool by_uuid = !mig.uuid.empty() && candidate.name == mig.uuid;
      bool by_index =
          candidate.name.size() > index_suffix.size() && candidate.name.ends_with(index_suffix) &&
          candidate.container_edits.device_nodes.size() == parent.edits.device_nodes.size() + 2;
      if (by_uuid || (mig.uuid.empty() && by_index)) cdi_device = &candidate;
    }
    if (!cdi_device || mig.profile.empty()) {
      node.warnings.push_back(gpu.pci_address + " MIG GI " + std::to_string(mig.gpu_instance_id) +
                              ": " + (cdi_device ? "profile unknown (no NVML)" : "no CDI device") +
                              "; not published");
      continue;
    }
    NodeDevice device = parent;
    device.name = parent.name + "-mig-" + std::to_string(mig.gpu_instance_id) + "-" +
                  std::to_string(mig.compute_instance_id);
    device.type = "mig";
    device.gpu_instance_id = mig.gpu_instance_id;
    device.uuid = mig.uuid;
    device.parent_uuid = parent.uuid;
    device.profile = mig.profile;
    device.product_name = parent.product_name + " MIG " + mig.profile;
    device.memory_bytes = mig.memory_bytes ? std::optional(mig.memory_bytes) : std::nullopt;
    device.multiprocessors =
        mig.multiprocessors ? std::optional(mig.multiprocessors) : std::nullopt;
    device.memory_slices.clear();
    if (mig.placement) {
      for (uint32_t s = 0; s < mig.placement->size && s < 16; ++s)
        device.memory_slices.push_back(mig.placement->start + s);
    }
    device.nvlink_module.reset();
    device.partition_ids.clear();
    device.edits = cdi_device->container_edits;
    node.devices.push_back(std::move(device));
  }
}

// One spec per mode, built over the whole inventory: its GPU (or pGPU) spec.
Result<std::map<cdi::Mode, cdi::Spec>> SpecsByMode(const inventory::Inventory& inventory,
                                                   cdi::Mode wanted) {
  std::map<cdi::Mode, cdi::Spec> specs;
  for (cdi::Mode mode : {cdi::Mode::kDriver, cdi::Mode::kVfio}) {
    if (wanted != cdi::Mode::kAuto && wanted != mode) continue;
    cdi::BuildOptions build;
    build.mode = mode;
    auto built = cdi::BuildSpecs(inventory, build);
    if (!built) return built.error().WithContext(std::string("CDI ") + cdi::ModeName(mode));
    for (auto& spec : built->specs) {
      if (spec.kind == "nvidia.com/gpu" || spec.kind == "nvidia.com/pgpu") {
        specs[mode] = std::move(spec);
      }
    }
  }
  return specs;
}

// The GPU's device in `spec`, under the first of its CDI names that the spec holds.
const cdi::Device* FindCdiDevice(const PciDevice& gpu, const cdi::Spec& spec) {
  const cdi::Device* cdi_device = nullptr;
  for (const auto& name : CdiNamesFor(gpu)) {
    for (const auto& candidate : spec.devices) {
      if (candidate.name == name) cdi_device = &candidate;
    }
    if (cdi_device) break;
  }
  return cdi_device;
}

// The device's NVLink module in the partition table, and the partitions that hold it.
void PlaceOnNvlink(const topology::PartitionTable& table, NodeDevice& device) {
  for (const auto& [module, address] : table.pci_addresses) {
    if (address == device.pci_address) device.nvlink_module = module;
  }
  if (!device.nvlink_module) return;
  for (const auto& partition : table.partitions) {
    const auto& modules = partition.modules;
    if (std::find(modules.begin(), modules.end(), *device.nvlink_module) != modules.end()) {
      device.partition_ids.push_back(partition.id);
    }
  }
}

// "10de:2330", as profile tables name boards.
std::string PciId(const PciDevice& gpu) {
  char text[16];
  snprintf(text, sizeof text, "%04x:%04x", gpu.vendor_id, gpu.device_id);
  return text;
}

// The minor of the GPU's /dev/nvidia<minor>.
std::optional<uint32_t> GpuMinor(const PciDevice& gpu) {
  for (const auto& n : gpu.device_nodes) {
    std::string_view path = n.path;
    if (path.starts_with("/dev/nvidia") && path.size() > 11 &&
        path.find_first_not_of("0123456789", 11) == std::string_view::npos)
      return n.minor;
  }
  return std::nullopt;
}

// MIG by demand: the GPU's instances that this plugin did not make stay as they are, published
// as their own MIG devices; the rest of the GPU is partitionable.
void AddByDemand(const PciDevice& gpu, const NodeDevice& whole, const cdi::Spec& spec,
                 const mig::ProfileTable& table, const NodeOptions& options, NodeDevices& node) {
  const auto owned_it = options.owned_instances.find(gpu.pci_address);
  const std::set<uint32_t> none;
  const std::set<uint32_t>& owned =
      owned_it == options.owned_instances.end() ? none : owned_it->second;
  PciDevice others = gpu;
  std::vector<ForeignInstance> foreign;
  others.mig->devices.clear();
  for (const inventory::MigDevice& mig : gpu.mig->devices) {
    if (owned.count(mig.gpu_instance_id)) continue;
    others.mig->devices.push_back(mig);
    bool seen = std::any_of(foreign.begin(), foreign.end(), [&](const ForeignInstance& f) {
      return f.gpu_instance_id == mig.gpu_instance_id;
    });
    if (seen) continue;
    // An instance of unknown place is taken to cover the whole GPU.
    ForeignInstance instance{mig.gpu_instance_id, mig.profile_id.value_or(UINT32_MAX), 0,
                             table.memory_slices};
    if (mig.placement) {
      instance.start = mig.placement->start;
      instance.size = mig.placement->size;
    }
    foreign.push_back(instance);
  }
  AddMigDevices(others, whole, spec, node);
  auto memory = options.profile_memory.find(gpu.pci_address);
  AddPartitionableGpu(
      whole, table, foreign,
      memory == options.profile_memory.end() ? std::map<uint32_t, uint64_t>{} : memory->second,
      node);
}

}  // namespace

std::string DeviceNameFor(std::string_view pci_address) {
  std::string name = "gpu-";
  for (char c : pci_address) {
    if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) {
      name += c;
    } else if (c >= 'A' && c <= 'Z') {
      name += static_cast<char>(c - 'A' + 'a');
    } else {
      name += '-';
    }
  }
  return name;
}

const NodeDevice* NodeDevices::Find(std::string_view name) const {
  for (const auto& device : devices) {
    if (device.name == name) return &device;
  }
  return nullptr;
}

Result<NodeDevices> DescribeNode(const inventory::Inventory& inventory,
                                 const NodeOptions& options) {
  if (options.mode != cdi::Mode::kAuto && options.mode != cdi::Mode::kDriver &&
      options.mode != cdi::Mode::kVfio) {
    return InvalidArgument(std::string("mode ") + cdi::ModeName(options.mode) +
                           ": want auto, driver or vfio");
  }
  NodeDevices node;
  auto built_specs = SpecsByMode(inventory, options.mode);
  if (!built_specs) return built_specs.error();
  const std::map<cdi::Mode, cdi::Spec>& specs = *built_specs;
  for (const PciDevice* gpu : inventory.Gpus()) {
    if (!gpu->is_nvidia()) continue;
    auto mode = ModeOf(*gpu, options.mode);
    if (!mode) {
      node.warnings.push_back(gpu->pci_address + ": driver \"" + gpu->driver +
                              "\" is neither nvidia nor vfio-pci; not published");
      continue;
    }
    auto spec = specs.find(*mode);
    const cdi::Device* cdi_device =
        spec == specs.end() ? nullptr : FindCdiDevice(*gpu, spec->second);
    if (!cdi_device) {
      node.warnings.push_back(gpu->pci_address + ": no CDI device in " + cdi::ModeName(*mode) +
                              " mode; not published");
      continue;
    }
    NodeDevice device;
    device.name = DeviceNameFor(gpu->pci_address);
    device.pci_address = gpu->pci_address;
    device.uuid = gpu->gpu_uuid.value_or("");
    device.product_name = gpu->model;
    device.type = *mode == cdi::Mode::kVfio ? "vfio" : "gpu";
    device.numa_node = gpu->numa_node;
    device.memory_bytes = KnownBoardMemory(gpu->vendor_id, gpu->device_id);
    if (gpu->driver == "nvidia" && inventory.nvidia_driver &&
        !inventory.nvidia_driver->version.empty()) {
      device.driver_version = inventory.nvidia_driver->version;
    }
    if (options.partitions) PlaceOnNvlink(*options.partitions, device);
    device.edits = cdi_device->container_edits;
    device.shared_edits = spec->second.container_edits;
    device.gpu_minor = GpuMinor(*gpu);
    const mig::ProfileTable* table = options.mig_by_demand && *mode == cdi::Mode::kDriver &&
                                             gpu->mig && gpu->mig->enabled == true
                                         ? mig::TableForDevice(options.mig_tables, PciId(*gpu))
                                         : nullptr;
    if (table) {
      AddByDemand(*gpu, device, spec->second, *table, options, node);
      continue;
    }
    if (*mode == cdi::Mode::kDriver && gpu->mig && gpu->mig->enabled != false &&
        !gpu->mig->devices.empty()) {
      // A MIG-enabled GPU runs CUDA only through its slices.
      AddMigDevices(*gpu, device, spec->second, node);
      continue;
    }
    node.devices.push_back(std::move(device));
  }
  return node;
}

const char* TaintEffectName(TaintEffect effect) {
  return effect == TaintEffect::kNoExecute ? "NoExecute" : "NoSchedule";
}

const DeviceFault* FaultOf(const NodeDevice& device, const DeviceState& state) {
  auto it = state.faults.find(device.pci_address);
  if (it == state.faults.end()) return nullptr;
  const DeviceFault& fault = it->second;
  // A fault of one GPU instance taints that instance's MIG device only; a GPU published whole
  // carries every fault of the GPU.
  if (fault.gpu_instance_id && device.gpu_instance_id &&
      *fault.gpu_instance_id != *device.gpu_instance_id)
    return nullptr;
  return &fault;
}

std::string WhyUnavailable(const NodeDevice& device, const DeviceState& state,
                           std::string_view claim_uid) {
  if (state.unhealthy.count(device.pci_address)) return "unhealthy";
  if (const DeviceFault* fault = FaultOf(device, state); fault && !claim_uid.empty()) {
    return "faulted (" + fault->value + "): " + fault->reason;
  }
  auto lease = state.leases.find(device.pci_address);
  if (lease == state.leases.end()) return {};
  if (lease->second.blocks_allocation()) {
    return std::string("lease state ") + deviceplugin::LeaseStateName(lease->second.state);
  }
  if (!claim_uid.empty() && !lease->second.claim.empty() && lease->second.claim != claim_uid) {
    return "leased to another claim";
  }
  return {};
}

}  // namespace tessera::dra

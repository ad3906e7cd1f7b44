// MIG devices as device-plugin resources, by strategy (none, single, mixed), as NVIDIA's device
// plugin names them. Pure: the inventory in, the resource names and devices out.
#include "deviceplugin/mig_resources.h"

#include <algorithm>

namespace tessera::deviceplugin {

const char* MigStrategyName(MigStrategy strategy) {
  switch (strategy) {
    case MigStrategy::kNone:
      return "none";
    case MigStrategy::kSingle:
      return "single";
    case MigStrategy::kMixed:
      return "mixed";
  }
  return "none";
}

Result<MigStrategy> ParseMigStrategy(std::string_view name) {
  if (name == "none") return MigStrategy::kNone;
  if (name == "single") return MigStrategy::kSingle;
  if (name == "mixed") return MigStrategy::kMixed;
  return InvalidArgument("MIG strategy \"" + std::string(name.substr(0, 32)) +
                         "\": want none, single or mixed");
}

std::string MigResourceName(std::string_view profile) {
  std::string name = "nvidia.com/mig-";
  for (char c : profile)
    name += c == '+' ? '.' : c;
  return name;
}

Result<MigPlan> PlanMigDevices(const inventory::Inventory& inventory, MigStrategy strategy) {
  MigPlan plan;
  if (strategy == MigStrategy::kNone) return plan;
  std::vector<const inventory::PciDevice*> nvidia;
  for (const auto& device : inventory.devices) {
    bool gpu_like = device.kind == inventory::DeviceKind::kGpu ||
                    device.kind == inventory::DeviceKind::kAccelerator;
    if (gpu_like && device.driver == "nvidia") nvidia.push_back(&device);
  }
  std::set<std::string> profiles;
  std::vector<std::string> whole;
  for (size_t index = 0; index < nvidia.size(); ++index) {
    const auto& gpu = *nvidia[index];
    bool mig_on = gpu.mig && gpu.mig->enabled.value_or(!gpu.mig->devices.empty());
    if (!mig_on) {
      whole.push_back(gpu.pci_address);
      continue;
    }
    plan.replaced_gpus.insert(gpu.pci_address);
    for (const auto& mig : gpu.mig->devices) {
      if (mig.profile.empty()) {
        return FailedPrecondition(gpu.pci_address + " MIG GI " +
                                  std::to_string(mig.gpu_instance_id) +
                                  ": profile unknown (NVML unavailable); MIG strategy " +
                                  MigStrategyName(strategy) + " needs it");
      }
      profiles.insert(mig.profile);
      MigPlan::Device device;
      device.parent_pci = gpu.pci_address;
      device.parent_index = index;
      device.mig = mig;
      device.resource =
          strategy == MigStrategy::kSingle ? "nvidia.com/gpu" : MigResourceName(mig.profile);
      plan.devices.push_back(std::move(device));
    }
  }
  if (strategy == MigStrategy::kSingle) {
    if (profiles.size() > 1) {
      std::string list;
      for (const auto& p : profiles)
        list += (list.empty() ? "" : ", ") + p;
      return FailedPrecondition(
          "migStrategy single needs one MIG profile on every GPU, but this "
          "node has " +
          list +
          "; use migStrategy mixed or re-partition "
          "(tessera mig apply)");
    }
    if (!plan.replaced_gpus.empty() && !whole.empty()) {
      return FailedPrecondition(
          "migStrategy single cannot mix GPUs with MIG on and off (off: " + whole.front() +
          (whole.size() > 1 ? " and " + std::to_string(whole.size() - 1) + " more"
                            : std::string()) +
          "); use migStrategy mixed");
    }
  }
  return plan;
}

PhysicalDevice MigPhysicalDevice(const inventory::Inventory& inventory,
                                 const MigPlan::Device& entry, const std::vector<cdi::Spec>& specs,
                                 std::vector<std::string>& warnings) {
  const inventory::PciDevice* parent = inventory.FindDevice(entry.parent_pci);
  std::string index_name =
      std::to_string(entry.parent_index) + ":" + std::to_string(entry.mig.index);
  PhysicalDevice device;
  device.mig = true;
  device.gpu_instance_id = entry.mig.gpu_instance_id;
  device.pci_address = entry.parent_pci;
  if (parent && parent->gpu_uuid) device.parent_uuid = *parent->gpu_uuid;
  device.id = entry.mig.uuid.empty() ? index_name : entry.mig.uuid;
  if (!entry.mig.uuid.empty()) device.uuid = entry.mig.uuid;
  device.numa_node = parent ? parent->numa_node : -1;
  device.model = (parent ? parent->model + " " : std::string()) + "MIG " + entry.mig.profile;
  device.vendor_id = 0x10de;
  device.driver = "nvidia";
  device.watch_paths.push_back(
      inventory::HostPath(inventory.root, "/sys/bus/pci/devices/" + entry.parent_pci));
  if (parent) {
    for (const auto& node : parent->device_nodes)
      if (node.exists) device.watch_paths.push_back(inventory::HostPath(inventory.root, node.path));
  }
  for (const auto* node : {&entry.mig.gpu_instance_node, &entry.mig.compute_instance_node}) {
    if (*node) device.watch_paths.push_back(inventory::HostPath(inventory.root, (*node)->path));
  }
  // The UUID name first: the index name changes when the GPU is re-partitioned.
  for (const std::string& wanted : {device.id, index_name}) {
    for (const auto& spec : specs) {
      for (const auto& cdi_device : spec.devices) {
        if (!device.cdi_name.empty() || cdi_device.name != wanted) continue;
        device.cdi_name = spec.kind + "=" + cdi_device.name;
        device.cdi_kind = spec.kind;
        device.edits = cdi_device.container_edits;
      }
    }
  }
  if (device.cdi_name.empty()) {
    warnings.push_back(entry.parent_pci + " MIG " + index_name +
                       ": no CDI device in the generated specs");
  }
  return device;
}

}  // namespace tessera::deviceplugin

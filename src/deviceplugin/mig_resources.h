// MIG devices as device-plugin resources (mig_resources.cc). Internal to deviceplugin.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "deviceplugin/deviceplugin.h"

namespace tessera::deviceplugin {

struct MigPlan {
  struct Device {
    std::string resource;  // nvidia.com/gpu (single) or nvidia.com/mig-<profile> (mixed)
    std::string parent_pci;
    size_t parent_index = 0;  // among NVIDIA-driver GPUs in PCI order: the CDI "<gpu>" index
    inventory::MigDevice mig;
  };
  std::set<std::string> replaced_gpus;  // MIG-enabled GPUs: advertised as their MIG devices only
  std::vector<Device> devices;
};

// "nvidia.com/mig-1g.10gb.me" for "1g.10gb+me".
std::string MigResourceName(std::string_view profile);
// The MIG devices to advertise under `strategy`; single refuses mixed layouts (several profiles,
// or MIG on some GPUs and off on others) with a message saying what to do.
Result<MigPlan> PlanMigDevices(const inventory::Inventory& inventory, MigStrategy strategy);
// The device a MIG slice is advertised as: ID = its MIG UUID (what NVIDIA_VISIBLE_DEVICES takes;
// "<gpu>:<mig>" without NVML), CDI device by the same names `tessera cdi generate` gives it, and
// health watched on the parent's sysfs entry and nodes plus the two capability nodes.
PhysicalDevice MigPhysicalDevice(const inventory::Inventory& inventory,
                                 const MigPlan::Device& entry, const std::vector<cdi::Spec>& specs,
                                 std::vector<std::string>& warnings);

}  // namespace tessera::deviceplugin

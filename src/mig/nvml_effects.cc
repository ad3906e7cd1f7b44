// Reading a GPU's MIG state from NVML and carrying out a plan through it.
#include <algorithm>

#include "mig/mig.h"

namespace tessera::mig {

Result<GpuState> ReadGpuState(const nvml::Library& nvml, const std::string& pci_address) {
  auto gpu = nvml.GpuByPci(pci_address);
  if (!gpu) return gpu.error();
  auto mode = nvml.GetMigMode(*gpu);
  if (!mode) return mode.error().WithContext(pci_address);
  if (!mode->has_value()) return FailedPrecondition(pci_address + ": GPU does not support MIG");
  GpuState state;
  state.pci_address = pci_address;
  state.mig_enabled = (*mode)->current;
  state.mig_pending = (*mode)->pending;
  if (!state.mig_enabled) return state;
  auto instances = nvml.GpuInstances(*gpu);
  if (!instances) return instances.error().WithContext(pci_address);
  auto devices = nvml.MigDevices(*gpu);
  if (!devices) return devices.error().WithContext(pci_address);
  for (const nvml::GpuInstance& gi : *instances) {
    Instance instance;
    instance.gpu_instance_id = gi.id;
    instance.profile_id = gi.profile_id;
    instance.placement = gi.placement;
    instance.compute_instances = static_cast<uint32_t>(gi.compute_instance_ids.size());
    for (const nvml::MigDevice& device : *devices) {
      if (device.gpu_instance_id != gi.id) continue;
      if (device.compute_instance_slices != device.gpu_instance_slices) instance.whole = false;
    }
    state.instances.push_back(instance);
  }
  return state;
}

Status ExecutePlan(const nvml::Library& nvml, const GpuPlan& plan) {
  auto gpu = nvml.GpuByPci(plan.pci_address);
  if (!gpu) return gpu.error();
  // Instances go before MIG mode is turned off: the driver refuses to disable it under them.
  auto destroy = [&]() -> Status {
    for (uint32_t id : plan.destroy) {
      if (auto s = nvml.DestroyGpuInstance(*gpu, id); !s) {
        return s.error().WithContext(plan.pci_address + ": destroy GPU instance " +
                                     std::to_string(id));
      }
    }
    return Ok();
  };
  if (plan.set_mig_mode == false) {
    if (auto s = destroy(); !s) return s;
  }
  if (plan.set_mig_mode) {
    auto active = nvml.SetMigMode(*gpu, *plan.set_mig_mode);
    if (!active) return active.error().WithContext(plan.pci_address);
    if (!*active) {
      return FailedPrecondition(plan.pci_address + ": MIG mode " +
                                (*plan.set_mig_mode ? "enabled" : "disabled") +
                                " is pending until the GPU is reset; reset it (nvidia-smi -r) "
                                "and apply again");
    }
  }
  if (plan.set_mig_mode != false) {
    if (auto s = destroy(); !s) return s;
  }
  for (const Creation& c : plan.create) {
    auto created = nvml.CreateGpuInstance(*gpu, c.profile_id, c.placement);
    if (!created) {
      return created.error().WithContext(plan.pci_address + ": create " + c.profile + " at " +
                                         std::to_string(c.placement.start));
    }
  }
  return Ok();
}

}  // namespace tessera::mig

// Which GPUs the collector reads: the host's NVIDIA GPUs on the nvidia driver (a GPU on vfio-pci
// belongs to a VM; NVML cannot see it).
#include "inventory/inventory.h"
#include "telemetry/telemetry.h"

namespace tessera::telemetry {

std::vector<GpuIdentity> GpuIdentitiesOf(const inventory::Inventory& inventory,
                                         const std::string& node) {
  std::vector<GpuIdentity> out;
  int index = 0;
  for (const auto* gpu : inventory.Gpus()) {
    const int nvml_index = index++;  // NVML numbers GPUs in PCI order
    if (gpu->vendor_id != 0x10de || gpu->driver != "nvidia") continue;
    GpuIdentity identity;
    identity.pci_address = gpu->pci_address;
    identity.uuid = gpu->gpu_uuid.value_or("");
    identity.model = gpu->model;
    identity.index = nvml_index;
    identity.minor = gpu->nvidia_minor.value_or(-1);
    identity.node = node;
    out.push_back(std::move(identity));
  }
  return out;
}

}  // namespace tessera::telemetry

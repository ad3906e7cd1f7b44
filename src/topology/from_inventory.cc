// GpuTopology from an Inventory: PCI bridge chains and NUMA nodes; NVLink counts come from the
// caller (the inventory does not read NVLink).
#include "inventory/inventory.h"
#include "topology/topology.h"

namespace tessera::topology {

Result<GpuTopology> TopologyFromInventory(const inventory::Inventory& inventory,
                                          std::vector<std::vector<int>> nvlinks) {
  GpuTopology topology;
  for (const inventory::PciDevice* device : inventory.Gpus()) {
    GpuInfo gpu;
    gpu.id = device->pci_address;
    gpu.pci_address = device->pci_address;
    gpu.numa_node = device->numa_node;
    gpu.upstream_bridges = device->upstream_bridges;
    topology.gpus.push_back(std::move(gpu));
  }
  if (topology.gpus.size() > static_cast<size_t>(kMaxGpus)) {
    return InvalidArgument("inventory has " + std::to_string(topology.gpus.size()) +
                           " GPUs, more than " + std::to_string(kMaxGpus));
  }
  if (!nvlinks.empty() && nvlinks.size() != topology.gpus.size()) {
    return InvalidArgument("nvlinks has " + std::to_string(nvlinks.size()) + " rows for the " +
                           std::to_string(topology.gpus.size()) + " GPUs of the inventory");
  }
  topology.nvlinks = std::move(nvlinks);
  return topology;
}

}  // namespace tessera::topology

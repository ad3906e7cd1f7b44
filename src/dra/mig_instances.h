// MIG by demand on this node: the NVML side of the driver's MigHooks, and the profile sizes the
// placement devices publish. Part of the plugin (it opens NVML); the driver stays NVML-free.
#pragma once

#include <memory>
#include <string>

#include "dra/dra.h"
#include "nvml/nvml.h"

namespace tessera::dra {

// Makes and destroys instances through `nvml` on the host under `root` ("/" on a node): a made
// instance's capability nodes are read from <root>/proc/driver/nvidia/capabilities and created
// under <root>/dev/nvidia-caps when missing, as nvidia-modprobe -f does.
MigHooks NvmlMigHooks(std::shared_ptr<const nvml::Library> nvml, std::string root);

// Bytes of each GPU instance profile of each MIG-enabled GPU of the inventory, by PCI address
// then profile ID; GPUs NVML cannot describe are left out.
std::map<std::string, std::map<uint32_t, uint64_t>> ProfileMemory(
    const nvml::Library& nvml, const inventory::Inventory& inventory);

}  // namespace tessera::dra

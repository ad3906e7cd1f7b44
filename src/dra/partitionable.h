// MIG by demand inside the dra module: a GPU with MIG on published as partitionable devices.
// Internal to src/dra (node.cc calls it); dra.h is the module's interface.
#pragma once

#include <vector>

#include "dra/dra.h"

namespace tessera::dra {

// The GPU instances already on a GPU that this plugin did not make: left alone, published as
// their own MIG devices, their slices taken out of the counter set.
struct ForeignInstance {
  uint32_t gpu_instance_id = 0;
  uint32_t profile_id = 0;
  uint32_t start = 0;
  uint32_t size = 0;
};

// Adds the GPU's counter set ("<whole.name>-counters"), the whole GPU (consuming every counter;
// left out while a foreign instance exists) and one device per profile and allowed start that no
// foreign instance overlaps ("<whole.name>-mig-<profile label>-<start>").
void AddPartitionableGpu(const NodeDevice& whole, const mig::ProfileTable& table,
                         const std::vector<ForeignInstance>& foreign,
                         const std::map<uint32_t, uint64_t>& profile_memory, NodeDevices& node);

// "<gpu device name>-counters"
std::string CounterSetName(std::string_view gpu_device_name);

}  // namespace tessera::dra

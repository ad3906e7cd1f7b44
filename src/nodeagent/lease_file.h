// The node lease file (/run/tessera/leases.json) the node agent writes from the GpuLeases of its
// node: what the device plugin and the DRA plugin read.
#pragma once

#include <string>
#include <vector>

#include "backends/kubernetes/node_gpus.h"
#include "kubernetes/client.h"

namespace tessera::k8s {

// The node lease file (/run/tessera/leases.json) for `node` from a GpuLease list. The file is
// keyed by canonical PCI address, so only those reach it: an ID in spec.gpuIds that is not one
// is written as the GPU the node's inventory (`known`) gives that UUID, or left out with a
// warning naming the lease; gpuIds that is not a list, or a state that is not a lease state,
// leaves the lease out with a warning. Reasons, tenancies and claim UIDs are written as
// bounded excerpts.
std::string LeaseFileFor(const Json& gpu_lease_list, const std::string& node,
                         const NodeGpus* known = nullptr,
                         std::vector<std::string>* warnings = nullptr);

}  // namespace tessera::k8s

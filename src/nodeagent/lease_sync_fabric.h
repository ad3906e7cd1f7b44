// tessera-lease-sync's part in shared NVSwitch mode on device-plugin clusters, which have no
// release hook: a leased Pod's NVLink partition is activated once kubelet reports the Pod's
// devices in PodResources, and deactivated once they are gone from it.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/kubernetes/node_gpus.h"
#include "fabricmanager/fabricmanager.h"
#include "kubernetes/client.h"
#include "podresources/podresources.h"

namespace tessera::k8s {

// Pure: lease name -> the PCI addresses of the devices its Pod holds now (kubelet's IDs mapped
// through this node's GPUs; each once), for the leases of `leases` whose Pod PodResources lists
// with devices of the lease's resource.
std::map<std::string, std::vector<std::string>> LeasedPodDevices(
    const std::map<std::string, Json>& leases, const podresources::PodList& pods,
    const NodeGpus& gpus);

// One round: holders whose Pod is gone are released (their partitions deactivated, as is any
// partition nothing holds), then each leased Pod's partition is activated (at once when held).
// Returns the problems of this round, one line each.
std::vector<std::string> SyncPartitions(
    fabricmanager::PartitionActivator& fabric,
    const std::map<std::string, std::vector<std::string>>& held);

}  // namespace tessera::k8s

// NVLink fabric partitions around every container (shared NVSwitch mode): the partition whose
// GPU set equals the container's is activated before the backend starts it, and deactivated once
// the container has ended, before the service hears of the end, so before its GPUs are checked.
// An activation the fabric manager refuses fails the start with its reason; the service then
// frees the GPUs through the normal check. After a restart of the service, the backend's list
// of containers is where the partitions are reconciled: ended containers' partitions are
// deactivated before the service handles the ends, and nothing else stays active.
#pragma once

#include <memory>

#include "backends/backend.h"
#include "fabricmanager/fabricmanager.h"

namespace tessera::serve {

std::unique_ptr<backends::ContainerBackend> ActivatePartitionsAround(
    std::unique_ptr<backends::ContainerBackend> backend,
    std::shared_ptr<fabricmanager::PartitionActivator> fabric);

}  // namespace tessera::serve

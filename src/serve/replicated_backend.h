// The backend as the leader of several replicas uses it: a container starts only once the store
// holds its placement (the record that says it started and which GPUs it holds), and only while
// this replica still leads. A leader that dies between the two then leaves a placement its
// successor sees, never a Pod and a lease nobody recorded; a leader that lost the lead while its
// placement was being written starts nothing.
#pragma once

#include <functional>
#include <memory>

#include "backends/backend.h"
#include "fleet/fleet.h"

namespace tessera::serve {

// `store` outlives the returned backend; `leading` unset: always.
std::unique_ptr<backends::ContainerBackend> StartAfterPlacementIsDurable(
    std::unique_ptr<backends::ContainerBackend> backend, fleet::Store& store,
    std::function<bool()> leading);

}  // namespace tessera::serve

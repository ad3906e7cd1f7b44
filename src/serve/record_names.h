#pragma once
// The store's record types under the short names the service's own files use (internal to
// src/serve; not part of its public header).
#include "fleet/fleet.h"

namespace tessera::serve {

using fleet::ContainerRecord;
using fleet::ContainerState;
using fleet::GpuRecord;
using fleet::LeaseState;
using fleet::Mutation;

}  // namespace tessera::serve

// Placement's part for published ports: every container placed in a pass that asks for ports
// gets its host ports (embedded mode: PortAllocator over --publish-ports, each checked free on
// the host by a bind test) in the same store transaction that records its placement, so the
// claim is as durable as the placement. A container whose ports cannot be had fails at once
// with the reason. Fleet mode leaves the host side to the backend (a Service).
#pragma once

#include <string>
#include <vector>

#include "fleet/fleet.h"
#include "serve/model.h"

namespace tessera::serve {

// mu held. `placed`: the containers the pass placed; `out`: the pass's mutations, whose copies
// of those records are brought up to date.
void PublishPortsLocked(Model& model, const std::vector<std::string>& placed,
                        std::vector<fleet::Mutation>& out);

}  // namespace tessera::serve

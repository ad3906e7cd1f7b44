// The node agent: builds the resource manager from the host, serves one socket per resource,
// registers with kubelet and keeps all of it true while the world changes (kubelet restarts,
// devices vanishing and returning, leases, SIGHUP). One event loop thread owns all of this
// state; the GPU fault keeper's and the MPS keeper's threads only call the manager's
// thread-safe setters.
#pragma once

#include <functional>

#include "common/error.h"
#include "deviceplugin/deviceplugin.h"

namespace tessera::deviceplugin {

// Loads the effective config (file, env, flags); called at start and on every SIGHUP.
using ConfigLoader = std::function<Result<Config>()>;

// Runs until SIGTERM or SIGINT (0) or a start-up failure (the error). Blocks SIGHUP, SIGTERM and
// SIGINT in the calling thread (and so in threads it starts) to read them from a signalfd.
Status RunAgent(const ConfigLoader& load_config);

}  // namespace tessera::deviceplugin

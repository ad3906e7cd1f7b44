// A Node object as the node agent leaves it: its GPUs (read from a fixture host) in the
// tessera node-GPU annotation, for tests that run the control plane against the scripted API
// server.
#pragma once

#include <string>

#include "kubernetes/client.h"

namespace tessera::testing {

// Creates Node `name` publishing the GPUs of fixture `host`; a failure is a test failure.
void PublishGpuNode(k8s::Client& admin, const std::string& name, const std::string& host);

}  // namespace tessera::testing

// `tessera doctor --server`: the GPUs tessera serve has taken out after a fault, and why
// (docs/faults.md), as doctor checks.
#pragma once

#include <string>
#include <vector>

#include "cli/api_session.h"
#include "runtimes/runtimes.h"

namespace tessera::cli {

// --server, --token-file, --context and TLS (AddApiOptions); the server is asked when --server or
// --context is given, with what ResolveApi finds for the rest (the client config applies).
struct DoctorServer {
  ApiFlags api;
  bool asked() const { return !api.server.empty() || !api.context.empty(); }
};

// GET /v1/gpus of the server: one PASS check when every GPU is healthy; else one check per
// faulted GPU, WARN while it recovers by itself, FAIL when it stays out until an operator acts.
// A server that cannot be asked is a FAIL naming why.
std::vector<runtimes::Check> GpuFaultChecks(const DoctorServer& options);

}  // namespace tessera::cli

// `tessera doctor --server`: the GPUs tessera serve has taken out after a fault, and why
// (docs/faults.md), as doctor checks.
#pragma once

#include <string>
#include <vector>

#include "client/tls_channel.h"
#include "runtimes/runtimes.h"

namespace tessera::cli {

struct DoctorServer {
  std::string server;  // empty: no server asked
  std::string token_file;
  client::TlsOptions tls;
};

// GET /v1/gpus of the server: one PASS check when every GPU is healthy; else one check per
// faulted GPU, WARN while it recovers by itself, FAIL when it stays out until an operator acts.
// A server that cannot be asked is a FAIL naming why.
std::vector<runtimes::Check> GpuFaultChecks(const DoctorServer& options);

}  // namespace tessera::cli

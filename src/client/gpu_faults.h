// The GPUs out of service after a fault, from a GET /v1/gpus answer (`tessera doctor --server`).
// Pure, and tested with hostile documents: the answer comes from whatever listens at --server, so
// text is cut to printable ASCII and a bounded length, and at most kMaxGpuFaults are kept.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/error.h"

namespace tessera::client {

inline constexpr size_t kMaxGpuFaults = 4096;

// One GPU whose health is not "healthy" (docs/faults.md).
struct GpuFault {
  std::string id;
  std::string model;
  std::string step;    // draining, resetting, verifying, self-test, firmware, out
  std::string reason;  // the fault that took it out, or why it stays out
  int attempts = 0;    // failed recovery attempts for this fault
  int64_t faulted_ms = 0;
  // The latest fault: "Xid 79, class gpu, action stop-gpu" (or the signal for no Xid); empty
  // when the answer has none.
  std::string last_fault;
  // Out until an operator acts; every other step recovers by itself.
  bool stays_out() const { return step == "out"; }
};

// InvalidArgument when `doc` is not a GPU listing ({"gpus": [...]}); GPUs without health (an
// older server) count as healthy.
Result<std::vector<GpuFault>> ListGpuFaults(const nlohmann::json& doc);

}  // namespace tessera::client

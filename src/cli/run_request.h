// The POST /v1/containers body `tessera run` sends, from its flags (pure).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/error.h"

namespace tessera::cli {

struct RunOptions {
  int gpus = 0;
  std::string tenancy = "default";
  std::string isolation = "runc";
  std::vector<std::string> env;      // NAME=VALUE
  std::vector<std::string> publish;  // PORT[/tcp|/udp][:NAME]
  int ready_port = 0;                // 0: no readiness probe
  std::string ready_path;
  int priority = 0;
  int64_t max_duration_s = 0;  // 0: no limit
  bool preemptible = false;
  std::string mig;    // PROFILE[xCOUNT]: MIG slices instead of gpus
  std::string share;  // MEMORY,COMPUTE[,mps|timeslice]: a share of one GPU instead of gpus
};

// One -p value as the API's ports entry: "8080" -> {containerPort: 8080}, "53/udp:dns" ->
// {containerPort: 53, protocol: "udp", name: "dns"}. The service checks the name's shape.
Result<nlohmann::json> ParsePublish(const std::string& text);

// `args` is IMAGE [COMMAND...].
Result<nlohmann::json> RunRequest(const RunOptions& options, const std::vector<std::string>& args);

}  // namespace tessera::cli

// `tessera doctor --server`: faulted GPUs as doctor checks (see doctor_faults.h).
#include "cli/doctor_faults.h"

#include <ctime>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "client/client.h"
#include "client/gpu_faults.h"

namespace tessera::cli {
namespace {

runtimes::Check Unreachable(const std::string& server, const std::string& why) {
  return {"gpu.faults", "GPU faults as tessera serve at " + server + " reports them",
          runtimes::Verdict::kFail, why,
          "start tessera serve, or name it with --server and its token with --token-file "
          "(or $TESSERA_TOKEN), or a context of tessera login with --context"};
}

std::string UtcTime(int64_t ms) {
  const std::time_t seconds = static_cast<std::time_t>(ms / 1000);
  std::tm utc{};
  char text[32] = "?";
  if (::gmtime_r(&seconds, &utc)) std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%SZ", &utc);
  return text;
}

runtimes::Check FaultCheck(const client::GpuFault& fault) {
  runtimes::Check check;
  check.id = "gpu.fault";
  check.title = "GPU " + fault.id + (fault.model.empty() ? "" : " (" + fault.model + ")") +
                " is out of service after a fault";
  std::string evidence = "step " + fault.step;
  if (fault.faulted_ms) evidence += " since the fault at " + UtcTime(fault.faulted_ms);
  if (!fault.reason.empty()) evidence += ": " + fault.reason;
  if (!fault.last_fault.empty()) evidence += "; latest fault " + fault.last_fault;
  if (fault.attempts) evidence += "; " + std::to_string(fault.attempts) + " failed recoveries";
  check.evidence = std::move(evidence);
  if (fault.stays_out()) {
    check.verdict = runtimes::Verdict::kFail;
    check.fix =
        "it stays out until an operator acts: repair or replace the GPU (reboot the node where "
        "the reason says so), then POST /v1/gpus/" +
        fault.id + "/release; GET /v1/gpus/" + fault.id + " has its history (docs/faults.md)";
  } else {
    check.verdict = runtimes::Verdict::kWarn;
    check.fix =
        "tessera recovers it by itself (drain, reset, verify, self-test) and returns it to "
        "service; GET /v1/gpus/" +
        fault.id + " has its history (docs/faults.md)";
  }
  return check;
}

}  // namespace

std::vector<runtimes::Check> GpuFaultChecks(const DoctorServer& options) {
  auto target = ResolveApi(options.api);
  const std::string server = target ? target->server : options.api.server;
  if (!target) return {Unreachable(server, target.error().message)};
  auto endpoint = client::ParseServer(server);
  if (!endpoint) return {Unreachable(server, endpoint.error().message)};
  client::Connection connection(*endpoint, target->token, target->tls);
  auto response = connection.Call("GET", "/v1/gpus");
  if (!response) return {Unreachable(server, response.error().message)};
  if (response->status != 200)
    return {Unreachable(server, "GET /v1/gpus: HTTP " + std::to_string(response->status))};
  auto doc = nlohmann::json::parse(response->body, nullptr, false);
  auto faults = client::ListGpuFaults(doc);
  if (!faults) return {Unreachable(server, "GET /v1/gpus: " + faults.error().message)};
  if (faults->empty()) {
    const size_t gpus = doc["gpus"].size();
    return {{"gpu.faults", "GPU faults as tessera serve at " + server + " reports them",
             runtimes::Verdict::kPass, std::to_string(gpus) + " GPUs, none out after a fault", ""}};
  }
  std::vector<runtimes::Check> checks;
  for (const auto& fault : *faults)
    checks.push_back(FaultCheck(fault));
  return checks;
}

}  // namespace tessera::cli

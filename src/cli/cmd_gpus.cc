// `tessera gpus`: the GPUs with their lease state, holder, health and reason (what the caller's
// token may see of them), and `tessera gpu drain|undrain|quarantine|release ID`: the admin's
// actions on one, over /v1/gpus.
#include <memory>

#include "cli/api_session.h"
#include "cli/commands.h"
#include "client/admin_requests.h"
#include "client/admin_views.h"

namespace tessera::cli {
namespace gpus_cmd {

using nlohmann::json;

// -o wide asks a server whose listing carries no fault_count each faulted GPU's history; past this
// many the count is "?".
constexpr size_t kMaxHistoryCalls = 256;

struct Flags {
  ApiFlags api;
  OutputFlags output;
  std::string action;
  std::string id;
  std::string reason;
};

// The fault history counts of the listed GPUs that have faulted; stops at the first call that
// fails (a tenant's rate limit, say): those left read "?".
std::map<std::string, size_t> FaultCounts(ApiSession& session, const json& listing) {
  std::map<std::string, size_t> counts;
  for (const auto& id : client::GpusWithFaults(listing, kMaxHistoryCalls)) {
    auto gpu = session.Json("GET", "/v1/gpus/" + id);
    if (!gpu) break;
    if (auto count = client::FaultHistoryCount(*gpu)) counts[id] = *count;
  }
  return counts;
}

void List(const Flags& flags) {
  ApiSession session = ConnectOrFail(flags.api);
  auto doc = session.Json("GET", "/v1/gpus");
  if (!doc) Fail(doc.error());
  std::map<std::string, size_t> counts;
  if (flags.output.format == "wide") counts = FaultCounts(session, *doc);
  auto table = client::GpuTable(*doc, counts);
  if (!table) Fail(table.error());
  PrintOutput(flags.output, *doc, *table);
}

void Act(const Flags& flags) {
  auto id = client::PathSegment(flags.id, "GPU");
  if (!id) Fail(id.error());
  json body = json::object();
  if (!flags.reason.empty()) body["reason"] = flags.reason;
  ApiSession session = ConnectOrFail(flags.api);
  auto gpu = session.Json("POST", "/v1/gpus/" + *id + "/" + flags.action, body.dump());
  if (!gpu) Fail(gpu.error());
  auto table = client::GpuTable(*gpu, {});
  if (!table) Fail(table.error());
  PrintOutput(flags.output, *gpu, *table);
}

}  // namespace gpus_cmd

void AddGpusCommand(CLI::App& app) {
  auto list_flags = std::make_shared<gpus_cmd::Flags>();
  CLI::App* gpus = app.add_subcommand(
      "gpus", "The GPUs: lease state, holder, health and reason (a tenant sees its own holdings)");
  AddApiOptions(gpus, list_flags->api);
  AddOutputOptions(gpus, list_flags->output);
  gpus->callback([list_flags] { gpus_cmd::List(*list_flags); });

  CLI::App* gpu = app.add_subcommand("gpu", "An operator's action on one GPU (admin)");
  gpu->require_subcommand(1);
  const std::pair<const char*, const char*> actions[] = {
      {"drain", "No new lease on the GPU; a running holder ends normally"},
      {"undrain", "Take new leases on a draining GPU again"},
      {"quarantine", "Take the GPU out of service: at once when free, else when its holder ends"},
      {"release",
       "Return a quarantined, draining or faulted GPU to service (its firmware as it is now "
       "becomes the baseline)"}};
  for (const auto& [name, help] : actions) {
    auto flags = std::make_shared<gpus_cmd::Flags>();
    flags->action = name;
    CLI::App* verb = gpu->add_subcommand(name, help);
    AddApiOptions(verb, flags->api);
    AddOutputOptions(verb, flags->output);
    verb->add_option("ID", flags->id, "The GPU's ID (tessera gpus shows them)")->required();
    verb->add_option("--reason", flags->reason, "Why, kept with the GPU and in the audit trail");
    verb->callback([flags] { gpus_cmd::Act(*flags); });
  }
}

}  // namespace tessera::cli

// `tessera inspect ID...`: container records as the API holds them (JSON, or YAML with -o yaml).
#include <cctype>
#include <cstdio>
#include <memory>
#include <optional>
#include <vector>

#include "cli/api_session.h"
#include "cli/commands.h"
#include "client/client.h"
#include "client/views.h"
#include "common/untrusted_text.h"

namespace tessera::cli {
namespace {

using nlohmann::json;

struct InspectFlags {
  ApiFlags api;
  OutputFlags output;
  std::vector<std::string> ids;
};

// One ID a tenant typed: what a container ID may hold, so no path is built from anything else.
bool LooksLikeContainerId(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') return false;
  return true;
}

void Inspect(const InspectFlags& flags) {
  for (const auto& id : flags.ids)
    if (!LooksLikeContainerId(id))
      Fail(InvalidArgument("container ID " + Excerpt(id, 40) + ": malformed"));
  ApiSession session = ConnectOrFail(flags.api);
  json records = json::array();
  std::optional<Error> first_error;
  for (const auto& id : flags.ids) {
    auto record = session.Json("GET", "/v1/containers/" + client::QueryEscape(id));
    if (record) {
      records.push_back(std::move(*record));
    } else if (!first_error) {
      first_error = record.error();
    } else {
      std::fprintf(stderr, "tessera: %s\n", record.error().message.c_str());
    }
  }
  // One ID: its record; several: the list of those found, in the order asked; then the first
  // error (another tenancy's container is not found either).
  if (flags.ids.size() == 1 && !records.empty())
    PrintOutput(flags.output, records[0], client::Table{});
  else if (!records.empty())
    PrintOutput(flags.output, records, client::Table{});
  if (first_error) Fail(*first_error);
}

}  // namespace

void AddInspectCommand(CLI::App& app) {
  auto flags = std::make_shared<InspectFlags>();
  CLI::App* inspect = app.add_subcommand("inspect", "Containers' records, as the API holds them");
  inspect->add_option("ID", flags->ids, "Container IDs")->required();
  AddApiOptions(inspect, flags->api);
  AddOutputOptions(inspect, flags->output, {"json", "yaml"});
  inspect->callback([flags] { Inspect(*flags); });
}

}  // namespace tessera::cli

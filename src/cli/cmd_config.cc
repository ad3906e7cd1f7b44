// `tessera config view|get-contexts|use-context|delete-context`: the client config that
// `tessera login` writes (client/client_config.h), shown and changed by context name.
#include <algorithm>
#include <cstdio>
#include <memory>

#include "cli/api_session.h"
#include "cli/commands.h"
#include "client/client_config.h"
#include "common/untrusted_text.h"

namespace tessera::cli {
namespace {

client::ClientConfig ReadConfigOrFail(const std::string& path) {
  auto config = client::ReadClientConfig(path);
  if (!config) Fail(config.error());
  return std::move(*config);
}

void WriteConfigOrFail(const std::string& path, const client::ClientConfig& config) {
  if (Status written = client::WriteClientConfig(path, config); !written.ok())
    Fail(written.error());
}

Error NoSuchContext(const std::string& name, const std::string& path) {
  return NotFound("context " + Excerpt(name, 63) + ": not in the client config " + path);
}

void GetContexts(const OutputFlags& output) {
  const client::ClientConfig config = ReadConfigOrFail(client::ClientConfigPath());
  client::Table table;
  table.columns = {{"CURRENT"},    {"NAME"},          {"SERVER"},
                   {"TOKEN-FILE"}, {"CA-FILE", true}, {"CLIENT-CERT", true}};
  nlohmann::json doc = {{"current-context", config.current}, {"contexts", nlohmann::json::array()}};
  for (const auto& context : config.contexts) {
    const bool current = context.name == config.current;
    table.rows.push_back({current ? "*" : "", client::Cell(context.name),
                          client::Cell(context.server), client::Cell(context.token_file),
                          client::Cell(context.ca_file), client::Cell(context.client_cert)});
    doc["contexts"].push_back({{"name", context.name},
                               {"server", context.server},
                               {"token-file", context.token_file},
                               {"ca-file", context.ca_file},
                               {"client-cert", context.client_cert},
                               {"client-key", context.client_key}});
  }
  PrintOutput(output, doc, table);
}

void UseContext(const std::string& name) {
  const std::string path = client::ClientConfigPath();
  client::ClientConfig config = ReadConfigOrFail(path);
  if (!config.Find(name)) Fail(NoSuchContext(name, path));
  config.current = name;
  WriteConfigOrFail(path, config);
  std::printf("Current context: %s\n", name.c_str());
}

void DeleteContext(const std::string& name) {
  const std::string path = client::ClientConfigPath();
  client::ClientConfig config = ReadConfigOrFail(path);
  auto found = std::find_if(config.contexts.begin(), config.contexts.end(),
                            [&](const auto& context) { return context.name == name; });
  if (found == config.contexts.end()) Fail(NoSuchContext(name, path));
  config.contexts.erase(found);
  if (config.current == name) config.current.clear();
  WriteConfigOrFail(path, config);
  std::printf("Deleted context %s from %s\n", name.c_str(), path.c_str());
}

}  // namespace

void AddConfigCommand(CLI::App& app) {
  CLI::App* config =
      app.add_subcommand("config",
                         "The client config that tessera login writes ($TESSERA_CONFIG, else "
                         "~/.config/tessera/config.yaml): its contexts, and which one is current");
  config->require_subcommand(1);
  config->add_subcommand("view", "Print the client config (it holds token files, never tokens)")
      ->callback([] {
        const std::string path = client::ClientConfigPath();
        const std::string text = client::FormatClientConfig(ReadConfigOrFail(path));
        std::fwrite(text.data(), 1, text.size(), stdout);
      });
  auto output = std::make_shared<OutputFlags>();
  CLI::App* get = config->add_subcommand("get-contexts", "List the contexts; * marks the current");
  AddOutputOptions(get, *output, {"table", "wide", "json", "yaml", "csv"});
  get->callback([output] { GetContexts(*output); });
  auto use_name = std::make_shared<std::string>();
  CLI::App* use = config->add_subcommand("use-context", "Make a context the current one");
  use->add_option("name", *use_name, "The context")->required();
  use->callback([use_name] { UseContext(*use_name); });
  auto delete_name = std::make_shared<std::string>();
  CLI::App* remove = config->add_subcommand("delete-context", "Remove a context");
  remove->add_option("name", *delete_name, "The context")->required();
  remove->callback([delete_name] { DeleteContext(*delete_name); });
}

}  // namespace tessera::cli

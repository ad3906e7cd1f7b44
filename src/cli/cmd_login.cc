// `tessera login`: checks that a server answers a token, and keeps both (the token's file, never
// the token) as a context of the client config, made the current one, so that later verbs need
// no --server or --token-file.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "cli/api_session.h"
#include "cli/commands.h"
#include "client/client_config.h"
#include "client/client_config_codec.h"
#include "common/bounded_file.h"
#include "common/untrusted_text.h"

namespace tessera::cli {
namespace {

struct LoginFlags {
  std::string server;
  std::string token_file;
  std::string context;
  client::TlsOptions tls;
  bool no_check = false;
};

std::string AbsolutePath(const std::string& path) {
  if (path.empty()) return path;
  std::error_code error;
  auto absolute = std::filesystem::absolute(path, error);
  return error ? path : absolute.lexically_normal().string();
}

// The server's host as a context name: lower case, characters outside a name's become '-'.
std::string NameFromHost(const std::string& host) {
  std::string name;
  for (char c : host) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    const bool fits = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_';
    if (name.empty() && !(fits && c != '.' && c != '_')) continue;
    name += fits ? c : '-';
  }
  if (name.size() > 63) name.resize(63);
  return name.empty() ? "default" : name;
}

std::string ReadTokenOrFail(const std::string& path) {
  auto text = ReadBoundedFile(path, kMaxTokenFileBytes);
  if (!text) Fail(text.error().WithContext("--token-file"));
  std::string token = *text;
  while (!token.empty() && (token.back() == '\n' || token.back() == ' ' || token.back() == '\r'))
    token.pop_back();
  if (token.empty()) Fail(InvalidArgument("--token-file " + Excerpt(path, 200) + ": empty"));
  return token;
}

// Who the token is, as far as the answers show: the admin sees every tenancy and may list
// tokens; a tenancy's token sees its own tenancy only.
std::string WhoOrFail(ApiSession& session) {
  auto tenancies = session.Json("GET", "/v1/tenancies");
  if (!tenancies) Fail(tenancies.error());
  const nlohmann::json list = tenancies->value("tenancies", nlohmann::json::array());
  if (!list.is_array() || list.size() != 1) return "the admin";
  auto tokens = session.Call("GET", "/v1/tokens");
  if (tokens && tokens->status == 200) return "the admin";
  return "tenancy " + client::Cell(list[0].is_object() ? list[0].value("name", nlohmann::json())
                                                       : nlohmann::json());
}

void RunLogin(const LoginFlags& flags) {
  client::ClientContext context;
  context.server = flags.server;
  context.token_file = AbsolutePath(flags.token_file);
  context.ca_file = AbsolutePath(flags.tls.ca_file);
  context.client_cert = AbsolutePath(flags.tls.cert_file);
  context.client_key = AbsolutePath(flags.tls.key_file);
  auto endpoint = client::ParseServer(flags.server);
  if (!endpoint) Fail(endpoint.error().WithContext("--server"));
  context.name = flags.context.empty() ? NameFromHost(endpoint->host) : flags.context;
  if (Status valid = client::CheckClientContext(context, "context"); !valid.ok())
    Fail(valid.error());
  const std::string token = ReadTokenOrFail(context.token_file);
  std::string who;
  if (!flags.no_check) {
    ApiSession session(ApiTarget{context.server, token, flags.tls});
    who = WhoOrFail(session);
  }
  const std::string path = client::ClientConfigPath();
  auto config = client::ReadClientConfig(path);
  if (!config) Fail(config.error());
  auto same = std::find_if(config->contexts.begin(), config->contexts.end(),
                           [&](const auto& c) { return c.name == context.name; });
  if (same != config->contexts.end()) {
    *same = context;
  } else {
    config->contexts.push_back(context);
  }
  config->current = context.name;
  if (Status written = client::WriteClientConfig(path, *config); !written.ok())
    Fail(written.error());
  if (!who.empty()) std::printf("Logged in to %s as %s.\n", context.server.c_str(), who.c_str());
  std::printf("Context %s%s, the current one, written to %s\n", context.name.c_str(),
              flags.no_check ? " (not checked)" : "", path.c_str());
}

}  // namespace

void AddLoginCommand(CLI::App& app) {
  auto flags = std::make_shared<LoginFlags>();
  CLI::App* login = app.add_subcommand(
      "login",
      "Check that a server answers a token, and keep them (the token's file, not the token) as "
      "the current context of the client config ($TESSERA_CONFIG, else "
      "~/.config/tessera/config.yaml)");
  login->add_option("--server", flags->server, "API address (http[s]://HOST:PORT)")->required();
  login->add_option("--token-file", flags->token_file, "File holding the token")->required();
  login->add_option("--ca-file", flags->tls.ca_file, "PEM CA(s) to verify an https:// server");
  auto* cert = login->add_option("--client-cert", flags->tls.cert_file,
                                 "PEM client certificate, for a server that asks for one");
  auto* key = login->add_option("--client-key", flags->tls.key_file, "PEM key of --client-cert");
  cert->needs(key);
  key->needs(cert);
  login->add_option("--context", flags->context,
                    "Name of the context (default: the server's host name)");
  login->add_flag("--no-check", flags->no_check, "Keep the context without asking the server");
  login->callback([flags] { RunLogin(*flags); });
}

}  // namespace tessera::cli

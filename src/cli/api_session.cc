// Where the client verbs find the API, and their calls and output (api_session.h).
#include "cli/api_session.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "cli/commands.h"
#include "client/client_config.h"
#include "common/bounded_file.h"
#include "common/untrusted_text.h"

namespace tessera::cli {
namespace {

constexpr char kDefaultTokenFile[] = "tessera-data/admin.token";

std::string FromEnv(const char* name) {
  const char* value = std::getenv(name);
  return value && *value ? value : "";
}

Result<std::string> ReadToken(const std::string& path) {
  auto text = ReadBoundedFile(path, kMaxTokenFileBytes);
  if (!text) return text.error().WithContext("token (set TESSERA_TOKEN or --token-file)");
  std::string token = *text;
  while (!token.empty() && (token.back() == '\n' || token.back() == ' '))
    token.pop_back();
  return token;
}

}  // namespace

void AddApiOptions(CLI::App* command, ApiFlags& flags) {
  command->add_option("--server", flags.server,
                      "API address (default $TESSERA_SERVER, the client config's context, "
                      "http://127.0.0.1:8080)");
  command->add_option("--token-file", flags.token_file,
                      "Token file (default $TESSERA_TOKEN, $TESSERA_TOKEN_FILE, the context's, "
                      "tessera-data/admin.token)");
  command->add_option("--context", flags.context,
                      "A context of the client config (tessera login) instead of its current one");
  command->add_option("--ca-file", flags.tls.ca_file,
                      "PEM CA(s) to verify an https:// server with (default $TESSERA_CA_FILE, "
                      "the context's, else the system's roots)");
  command->add_option("--client-cert", flags.tls.cert_file,
                      "PEM client certificate, for a server that asks for one");
  command->add_option("--client-key", flags.tls.key_file, "PEM key of --client-cert");
}

Result<ApiTarget> ResolveApi(const ApiFlags& flags) {
  client::ClientContext context;
  const bool needs_config =
      flags.server.empty() || flags.token_file.empty() || !flags.context.empty();
  if (needs_config) {
    auto config = client::ReadClientConfig(client::ClientConfigPath());
    if (!config) return config.error();
    const client::ClientContext* found = config->Find(flags.context);
    if (!flags.context.empty() && !found)
      return NotFound("context " + Excerpt(flags.context, 63) + ": not in the client config " +
                      client::ClientConfigPath());
    if (found) context = *found;
  }
  auto first = [](std::initializer_list<std::string> choices) {
    for (const auto& choice : choices)
      if (!choice.empty()) return choice;
    return std::string();
  };
  ApiTarget target;
  target.server =
      first({flags.server, FromEnv("TESSERA_SERVER"), context.server, "http://127.0.0.1:8080"});
  target.tls.ca_file = first({flags.tls.ca_file, FromEnv("TESSERA_CA_FILE"), context.ca_file});
  target.tls.cert_file = first({flags.tls.cert_file, context.client_cert});
  target.tls.key_file = first({flags.tls.key_file, context.client_key});
  if (std::string token = FromEnv("TESSERA_TOKEN"); !token.empty()) {
    target.token = token;
    return target;
  }
  const std::string named =
      first({flags.token_file, FromEnv("TESSERA_TOKEN_FILE"), context.token_file});
  if (named.empty() && ::access(kDefaultTokenFile, F_OK) != 0) {
    // None named and no service's token here: ask without one (a node agent's endpoint takes
    // none; the service answers 401, which ApiSession turns into "no token").
    return target;
  }
  auto token = ReadToken(named.empty() ? kDefaultTokenFile : named);
  if (!token) return token.error();
  target.token = *token;
  return target;
}

Error ApiError(const client::Response& response, const std::string& what) {
  std::string message = response.body;
  // Nested deeper than the bound, the answer is not even parsed: freeing it would recurse.
  auto doc = CheckJsonNesting(response.body, "answer").ok()
                 ? nlohmann::json::parse(response.body, nullptr, false)
                 : nlohmann::json();
  if (doc.is_object() && doc.contains("error") && doc["error"].is_object() &&
      doc["error"].contains("message") && doc["error"]["message"].is_string())
    message = doc["error"]["message"].get<std::string>();
  message = what + ": HTTP " + std::to_string(response.status) + ": " + Excerpt(message, 300);
  switch (response.status) {
    case 400:
      return InvalidArgument(message);
    case 401:
    case 403:
      return PermissionDenied(message);
    case 404:
      return NotFound(message);
    case 409:
      return FailedPrecondition(message);
    case 429:
    case 503:
      return Unavailable(message);
    default:
      return Internal(message);
  }
}

ApiSession::ApiSession(ApiTarget target) : target_(std::move(target)) {}

Result<client::Response> ApiSession::Call(const std::string& method, const std::string& path,
                                          const std::string& body) {
  if (!connection_) {
    auto endpoint = client::ParseServer(target_.server);
    if (!endpoint) return endpoint.error();
    connection_ = std::make_unique<client::Connection>(*endpoint, target_.token, target_.tls);
  }
  auto response = connection_->Call(method, path, body);
  if (!response) return response.error().WithContext(target_.server);
  return response;
}

Result<nlohmann::json> ApiSession::Json(const std::string& method, const std::string& path,
                                        const std::string& body) {
  auto response = Call(method, path, body);
  if (!response) return response.error();
  const std::string what = method + " " + Excerpt(path, 120);
  if (response->status == 401 && target_.token.empty())
    return PermissionDenied(what +
                            ": HTTP 401: no token found (tessera login, --token-file, "
                            "$TESSERA_TOKEN or $TESSERA_TOKEN_FILE)");
  if (response->status < 200 || response->status >= 300) return ApiError(*response, what);
  if (response->body.empty()) return nlohmann::json::object();
  if (Status nesting = CheckJsonNesting(response->body, "answer"); !nesting.ok())
    return nesting.error().WithContext(what);
  auto doc = nlohmann::json::parse(response->body, nullptr, false);
  if (doc.is_discarded()) return Unavailable(what + ": the answer is not JSON");
  return doc;
}

ApiSession ConnectOrFail(const ApiFlags& flags) {
  auto target = ResolveApi(flags);
  if (!target) Fail(target.error());
  return ApiSession(std::move(*target));
}

void AddOutputOptions(CLI::App* command, OutputFlags& flags, std::vector<std::string> formats) {
  flags.format = formats.front();
  command->add_option("-o,--output", flags.format, "Output format")
      ->check(CLI::IsMember(formats))
      ->capture_default_str();
  command->add_flag("--no-headers", flags.no_headers, "Leave out the header line of a table");
}

void PrintOutput(const OutputFlags& flags, const nlohmann::json& doc, const client::Table& table) {
  auto format = client::ParseOutputFormat(flags.format);
  if (!format) Fail(format.error());
  std::string text;
  switch (*format) {
    case client::OutputFormat::kJson:
      text = client::RenderJson(doc);
      break;
    case client::OutputFormat::kYaml:
      text = client::RenderYaml(doc);
      break;
    case client::OutputFormat::kCsv:
      text = client::RenderCsv(table, !flags.no_headers);
      break;
    default:
      text = client::RenderTable(table, *format == client::OutputFormat::kWide, !flags.no_headers);
  }
  std::fwrite(text.data(), 1, text.size(), stdout);
}

}  // namespace tessera::cli

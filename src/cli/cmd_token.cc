// `tessera token create|list|revoke`: the API's tokens (admin): a tenancy's tenant or read-only
// tokens, metrics tokens, and their revocation.
#include <chrono>
#include <cstdio>
#include <memory>

#include "cli/api_session.h"
#include "cli/commands.h"
#include "client/admin_requests.h"
#include "client/admin_views.h"

namespace tessera::cli {
namespace token_cmd {

using nlohmann::json;

struct Flags {
  ApiFlags api;
  OutputFlags output;
  std::string tenancy;
  std::string scope;
  std::string expires;
  bool metrics = false;
  bool quiet = false;
  std::vector<std::string> ids;
};

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void Create(const Flags& flags) {
  if (flags.metrics == !flags.tenancy.empty())
    Fail(InvalidArgument("token create: give --tenancy NAME, or --metrics for a metrics token"));
  auto body = client::TokenRequestBody(flags.scope, flags.expires, flags.metrics);
  if (!body) Fail(body.error());
  std::string path = "/v1/tokens";
  if (!flags.metrics) {
    auto tenancy = client::PathSegment(flags.tenancy, "--tenancy");
    if (!tenancy) Fail(tenancy.error());
    path = "/v1/tenancies/" + *tenancy + "/tokens";
  }
  ApiSession session = ConnectOrFail(flags.api);
  auto created = session.Json("POST", path, body->dump());
  if (!created) Fail(created.error());
  if (flags.quiet) {
    auto secret = client::CreatedTokenSecret(*created);
    if (!secret) Fail(secret.error());
    std::printf("%s\n", secret->c_str());
    return;
  }
  auto table = client::CreatedTokenTable(*created);
  if (!table) Fail(table.error());
  PrintOutput(flags.output, *created, *table);
  std::fputs("The token is shown only this once.\n", stderr);
}

void List(const Flags& flags) {
  std::string path = "/v1/tokens";
  if (!flags.tenancy.empty()) path += "?tenancy=" + client::QueryEscape(flags.tenancy);
  ApiSession session = ConnectOrFail(flags.api);
  auto doc = session.Json("GET", path);
  if (!doc) Fail(doc.error());
  auto table = client::TokenTable(*doc, NowMs());
  if (!table) Fail(table.error());
  PrintOutput(flags.output, *doc, *table);
}

// Each ID in turn; a failure is told and the others still revoked, and the command exits with
// the first failure's code.
void Revoke(const Flags& flags) {
  std::optional<ApiSession> session;
  std::optional<Error> first_failure;
  auto failed = [&](const Error& error) {
    std::fprintf(stderr, "tessera: %s\n", error.message.c_str());
    if (!first_failure) first_failure = error;
  };
  for (const auto& id : flags.ids) {
    auto segment = client::PathSegment(id, "token");
    if (!segment) {
      failed(segment.error());
      continue;
    }
    if (!session) session.emplace(ConnectOrFail(flags.api));
    auto revoked = session->Json("DELETE", "/v1/tokens/" + *segment);
    if (!revoked) {
      failed(revoked.error());
      continue;
    }
    std::printf("token %s revoked\n", segment->c_str());
  }
  if (first_failure) throw CLI::RuntimeError(ExitCodeFor(*first_failure));
}

}  // namespace token_cmd

void AddTokenCommand(CLI::App& app) {
  CLI::App* token = app.add_subcommand("token", "API tokens: create, list, revoke (admin)");
  token->require_subcommand(1);

  auto create_flags = std::make_shared<token_cmd::Flags>();
  CLI::App* create = token->add_subcommand(
      "create", "Make a token for a tenancy (or a metrics token); its secret is shown once");
  AddApiOptions(create, create_flags->api);
  AddOutputOptions(create, create_flags->output);
  create->add_option("--tenancy", create_flags->tenancy, "The tenancy the token acts for");
  create->add_option("--scope", create_flags->scope,
                     "tenant (the default: what its tenancy may) or read-only (GET only)");
  create->add_option("--expires", create_flags->expires,
                     "Lifetime such as 30d, 12h or 1w (default: never expires)");
  create->add_flag("--metrics", create_flags->metrics,
                   "A metrics token (GET /metrics only; no tenancy)");
  create->add_flag("-q,--quiet", create_flags->quiet,
                   "Print only the secret, for a script to keep");
  create->callback([create_flags] { token_cmd::Create(*create_flags); });

  auto list_flags = std::make_shared<token_cmd::Flags>();
  CLI::App* list = token->add_subcommand(
      "list", "List the tokens, oldest first (never their secrets; the admin's is not listed)");
  AddApiOptions(list, list_flags->api);
  AddOutputOptions(list, list_flags->output);
  list->add_option("--tenancy", list_flags->tenancy, "Only this tenancy's tokens");
  list->callback([list_flags] { token_cmd::List(*list_flags); });

  auto revoke_flags = std::make_shared<token_cmd::Flags>();
  CLI::App* revoke = token->add_subcommand(
      "revoke", "Revoke tokens: the next request with one is refused, on open connections too");
  AddApiOptions(revoke, revoke_flags->api);
  revoke->add_option("ID", revoke_flags->ids, "Token IDs (token list shows them)")->required();
  revoke->callback([revoke_flags] { token_cmd::Revoke(*revoke_flags); });
}

}  // namespace tessera::cli

// What every client verb shares: where the API is and with which token (flags, environment, the
// client config's context), one connection to it, JSON calls whose HTTP errors become the CLI's
// exit codes, and the -o/--no-headers output flags.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "client/client.h"
#include "client/output.h"
#include "common/error.h"

namespace tessera::cli {

struct ApiFlags {
  std::string server;      // --server
  std::string token_file;  // --token-file
  std::string context;     // --context: a context of the client config instead of its current
  client::TlsOptions tls;  // --ca-file, --client-cert, --client-key
};
// --server, --token-file, --context and the TLS options on `command`.
void AddApiOptions(CLI::App* command, ApiFlags& flags);

// Resolution, first found wins: the flag; $TESSERA_SERVER / $TESSERA_TOKEN /
// $TESSERA_TOKEN_FILE / $TESSERA_CA_FILE; the client config's context (--context, else its
// current); the defaults (http://127.0.0.1:8080, tessera-data/admin.token when it exists, else
// no token). A token file that is named and cannot be read is an error.
struct ApiTarget {
  std::string server;
  std::string token;  // empty: none found (a node agent asks for none)
  client::TlsOptions tls;
};
Result<ApiTarget> ResolveApi(const ApiFlags& flags);

// An answer that is not 2xx as an Error: 400 InvalidArgument, 401/403 PermissionDenied, 404
// NotFound, 409 FailedPrecondition, 429/503 Unavailable, others Internal; the message is
// "<what>: HTTP <status>: <the API's message, excerpted>".
Error ApiError(const client::Response& response, const std::string& what);

class ApiSession {
 public:
  explicit ApiSession(ApiTarget target);

  const std::string& server() const { return target_.server; }

  // The answer whatever its status (transport errors only).
  Result<client::Response> Call(const std::string& method, const std::string& path,
                                const std::string& body = "");
  // A 2xx answer's JSON document; else the API's error as an Error: 400 InvalidArgument,
  // 401/403 PermissionDenied, 404 NotFound, 409 FailedPrecondition, 429/503 Unavailable,
  // others Internal; the message is "<what>: <the API's message, excerpted>".
  Result<nlohmann::json> Json(const std::string& method, const std::string& path,
                              const std::string& body = "");

 private:
  ApiTarget target_;
  std::unique_ptr<client::Connection> connection_;
};

// ResolveApi and a session, or Fail().
ApiSession ConnectOrFail(const ApiFlags& flags);

struct OutputFlags {
  std::string format = "table";  // -o/--output
  bool no_headers = false;       // --no-headers
};
// -o/--output with `formats` as the choices (the first is the default) and --no-headers.
void AddOutputOptions(CLI::App* command, OutputFlags& flags,
                      std::vector<std::string> formats = {"table", "wide", "json", "yaml"});
// Prints the document (json, yaml) or the table (table, wide, csv) to stdout.
void PrintOutput(const OutputFlags& flags, const nlohmann::json& doc, const client::Table& table);

}  // namespace tessera::cli

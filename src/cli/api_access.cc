// Where the `tessera` client commands (run, top) find the API and its token.
#include <cstdlib>

#include "cli/commands.h"
#include "common/bounded_file.h"

namespace tessera::cli {

std::string ApiServer(const std::string& flag) {
  if (!flag.empty()) return flag;
  const char* env = std::getenv("TESSERA_SERVER");
  return env && *env ? env : "http://127.0.0.1:8080";
}

Result<std::string> ApiToken(const std::string& token_file) {
  if (const char* token = std::getenv("TESSERA_TOKEN"); token && *token) return std::string(token);
  std::string path = token_file;
  if (path.empty()) {
    const char* env = std::getenv("TESSERA_TOKEN_FILE");
    path = env && *env ? env : "tessera-data/admin.token";
  }
  auto text = ReadBoundedFile(path, kMaxTokenFileBytes);
  if (!text) return text.error().WithContext("token (set TESSERA_TOKEN or --token-file)");
  std::string token = *text;
  while (!token.empty() && (token.back() == '\n' || token.back() == ' '))
    token.pop_back();
  return token;
}

void AddTlsOptions(CLI::App* command, client::TlsOptions& options) {
  if (const char* env = std::getenv("TESSERA_CA_FILE"); env && *env) options.ca_file = env;
  command->add_option("--ca-file", options.ca_file,
                      "PEM CA(s) to verify an https:// server with (default $TESSERA_CA_FILE, "
                      "else the system's roots)");
  command->add_option("--client-cert", options.cert_file,
                      "PEM client certificate, for a server that asks for one");
  command->add_option("--client-key", options.key_file, "PEM key of --client-cert");
}

}  // namespace tessera::cli

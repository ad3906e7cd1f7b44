// The client's own configuration (`tessera login` writes it): named contexts, each a server with
// its token file and TLS files, and the current one, so no flag is repeated. Like a kubeconfig,
// it is a YAML file the user owns; reading it is bounded as every operator file is (size, a
// regular file only, YAML nesting and node count), since it may come from anywhere.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace tessera::client {

inline constexpr size_t kMaxClientConfigBytes = 64 * 1024;
inline constexpr size_t kMaxClientContexts = 64;

struct ClientContext {
  std::string name;        // DNS-1123 label-like: [a-z0-9._-], 1..63
  std::string server;      // as --server takes it
  std::string token_file;  // absolute path
  std::string ca_file;     // absolute paths or empty
  std::string client_cert;
  std::string client_key;
};

struct ClientConfig {
  std::string current;  // a context's name, or empty
  std::vector<ClientContext> contexts;

  // The named context, else the current one; nullptr when there is none.
  const ClientContext* Find(std::string_view name) const;
};

// $TESSERA_CONFIG, else $XDG_CONFIG_HOME/tessera/config.yaml, else
// $HOME/.config/tessera/config.yaml.
std::string ClientConfigPath();

// Pure: the file's text to a config; InvalidArgument naming the field otherwise.
Result<ClientConfig> ParseClientConfig(std::string_view text);
std::string FormatClientConfig(const ClientConfig& config);

// Reads `path` (a missing file is an empty config); refuses what is not a regular file, over
// kMaxClientConfigBytes, or malformed.
Result<ClientConfig> ReadClientConfig(const std::string& path);
// Writes it atomically with mode 0600, creating the directory (0700).
Status WriteClientConfig(const std::string& path, const ClientConfig& config);

}  // namespace tessera::client

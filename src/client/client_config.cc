// The client config file (client_config.h).
#include "client/client_config.h"

#include <cstdlib>

namespace tessera::client {

const ClientContext* ClientConfig::Find(std::string_view name) const {
  const std::string_view wanted = name.empty() ? std::string_view(current) : name;
  if (wanted.empty()) return nullptr;
  for (const auto& context : contexts)
    if (context.name == wanted) return &context;
  return nullptr;
}

std::string ClientConfigPath() {
  if (const char* path = std::getenv("TESSERA_CONFIG"); path && *path) return path;
  if (const char* xdg = std::getenv("XDG_CONFIG_HOME"); xdg && *xdg)
    return std::string(xdg) + "/tessera/config.yaml";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.config/tessera/config.yaml";
}

Result<ClientConfig> ParseClientConfig(std::string_view text) {
  (void)text;
  return InvalidArgument("client config: not read yet");
}

std::string FormatClientConfig(const ClientConfig& config) {
  (void)config;
  return "";
}

Result<ClientConfig> ReadClientConfig(const std::string& path) {
  (void)path;
  return ClientConfig{};
}

Status WriteClientConfig(const std::string& path, const ClientConfig& config) {
  (void)path;
  (void)config;
  return FailedPrecondition("client config: not written yet");
}

}  // namespace tessera::client

// The client config file (client_config.h): where it lives, and reading and writing it; its text
// is parsed and written by client_config_codec.cc.
#include "client/client_config.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>

#include "common/atomic_file.h"
#include "common/bounded_file.h"

namespace tessera::client {
namespace {

// Creates `dir` and its missing parents with mode 0700; existing ones are left as they are.
Status MakePrivateDirs(const std::string& dir) {
  if (dir.empty()) return Ok();
  struct stat info {};
  if (::stat(dir.c_str(), &info) == 0) {
    if (S_ISDIR(info.st_mode)) return Ok();
    return InvalidArgument(dir + ": " + FileKind(info.st_mode) + ", not a directory");
  }
  const auto slash = dir.find_last_of('/');
  if (slash != std::string::npos && slash > 0) {
    if (Status parent = MakePrivateDirs(dir.substr(0, slash)); !parent.ok()) return parent;
  }
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return ErrnoError("mkdir " + dir, errno);
  return Ok();
}

}  // namespace

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

Result<ClientConfig> ReadClientConfig(const std::string& path) {
  auto text = ReadBoundedFile(path, kMaxClientConfigBytes);
  if (!text) {
    if (text.error().category == ErrorCategory::kNotFound) return ClientConfig{};
    return text.error().WithContext("client config");
  }
  auto config = ParseClientConfig(*text);
  if (!config) return config.error().WithContext(path);
  return config;
}

Status WriteClientConfig(const std::string& path, const ClientConfig& config) {
  const std::string text = FormatClientConfig(config);
  // Only what reads back as the same config is written.
  if (auto again = ParseClientConfig(text); !again) return again.error();
  if (text.size() > kMaxClientConfigBytes)
    return InvalidArgument("client config: larger than " + std::to_string(kMaxClientConfigBytes) +
                           " bytes");
  const auto slash = path.find_last_of('/');
  if (slash != std::string::npos) {
    if (Status dir = MakePrivateDirs(path.substr(0, slash)); !dir.ok()) return dir;
  }
  return WriteFileAtomically(path, text, 0600, Durability::kPowerLoss);
}

}  // namespace tessera::client

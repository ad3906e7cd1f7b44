// The client config's text: parsed strictly (every key known, every value a string of the right
// shape, bounded in size and nesting) and written back so that parsing it again gives the same
// config (client_config.h, client_config_codec.h).
#include "client/client_config_codec.h"

#include <yaml-cpp/yaml.h>

#include <set>
#include <string>

#include "client/client.h"
#include "client/client_config.h"
#include "common/bounded_yaml.h"
#include "common/untrusted_text.h"

namespace tessera::client {
namespace {

constexpr size_t kMaxConfigValueBytes = 4096;
constexpr size_t kMaxContextNameBytes = 63;

// The length of the UTF-8 sequence at `at` and its code point; 0 when it is not valid UTF-8
// (overlong forms, surrogates and code points past U+10FFFF included).
size_t DecodeUtf8(std::string_view text, size_t at, char32_t* code) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(at);
  size_t length = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xe ? 3 : 4;
  if ((lead >> 3) == 0x1f || (lead & 0xc0) == 0x80 || at + length > text.size()) return 0;
  char32_t value = length == 1 ? lead : lead & (0x7f >> length);
  for (size_t i = 1; i < length; ++i) {
    if ((byte(at + i) & 0xc0) != 0x80) return 0;
    value = (value << 6) | (byte(at + i) & 0x3f);
  }
  static constexpr char32_t kSmallest[] = {0, 0, 0x80, 0x800, 0x10000};
  if (value < kSmallest[length] || value > 0x10ffff || (value >= 0xd800 && value <= 0xdfff))
    return 0;
  *code = value;
  return length;
}

// Text a value may hold: valid UTF-8 without control characters or the code points YAML reads
// as line breaks or a byte order mark.
Status CheckConfigText(std::string_view value, std::string_view field) {
  if (value.size() > kMaxConfigValueBytes)
    return InvalidArgument(std::string(field) + ": longer than " +
                           std::to_string(kMaxConfigValueBytes) + " bytes");
  for (size_t at = 0; at < value.size();) {
    char32_t code = 0;
    const size_t length = DecodeUtf8(value, at, &code);
    if (length == 0) return InvalidArgument(std::string(field) + ": not valid UTF-8");
    if (code < 0x20 || (code >= 0x7f && code <= 0x9f) || code == 0x2028 || code == 0x2029 ||
        code == 0xfeff)
      return InvalidArgument(std::string(field) + ": holds a control character: " + Excerpt(value));
    at += length;
  }
  return Ok();
}

Status CheckConfigPath(std::string_view path, std::string_view field, bool required) {
  if (path.empty()) return required ? InvalidArgument(std::string(field) + ": required") : Ok();
  if (Status text = CheckConfigText(path, field); !text.ok()) return text;
  if (path.front() != '/')
    return InvalidArgument(std::string(field) + ": not an absolute path: " + Excerpt(path));
  return Ok();
}

// A mapping's key as a string, or why it is not one.
Result<std::string> ConfigKeyOf(const YAML::Node& key, const std::string& field) {
  if (!key.IsScalar()) return InvalidArgument(field + ": a key that is not a string");
  return key.Scalar();
}

// A string value (null reads as empty), or why it is not one.
Result<std::string> ConfigStringOf(const YAML::Node& value, const std::string& field) {
  if (value.IsNull()) return std::string();
  if (!value.IsScalar()) return InvalidArgument(field + ": not a string");
  return value.Scalar();
}

std::string* ContextSlotFor(ClientContext& context, const std::string& key) {
  if (key == "name") return &context.name;
  if (key == "server") return &context.server;
  if (key == "token-file") return &context.token_file;
  if (key == "ca-file") return &context.ca_file;
  if (key == "client-cert") return &context.client_cert;
  if (key == "client-key") return &context.client_key;
  return nullptr;
}

Result<ClientContext> ParseContext(const YAML::Node& node, const std::string& field) {
  if (!node.IsMap()) return InvalidArgument(field + ": not a mapping");
  ClientContext context;
  std::set<std::string> seen;
  for (const auto& entry : node) {
    auto key = ConfigKeyOf(entry.first, field);
    if (!key) return key.error();
    std::string* slot = ContextSlotFor(context, *key);
    if (!slot)
      return InvalidArgument(field + ": unknown key \"" + Excerpt(*key, 40) +
                             "\" (name, server, token-file, ca-file, client-cert, client-key)");
    if (!seen.insert(*key).second) return InvalidArgument(field + "." + *key + ": repeated");
    auto value = ConfigStringOf(entry.second, field + "." + *key);
    if (!value) return value.error();
    *slot = std::move(*value);
  }
  if (Status valid = CheckClientContext(context, field); !valid.ok()) return valid.error();
  return context;
}

Status ParseContexts(const YAML::Node& node, ClientConfig& config) {
  if (node.IsNull()) return Ok();
  if (!node.IsSequence()) return InvalidArgument("contexts: not a list");
  if (node.size() > kMaxClientContexts)
    return InvalidArgument("contexts: more than " + std::to_string(kMaxClientContexts));
  std::set<std::string> names;
  for (size_t i = 0; i < node.size(); ++i) {
    const std::string field = "contexts[" + std::to_string(i) + "]";
    auto context = ParseContext(node[i], field);
    if (!context) return context.error();
    if (!names.insert(context->name).second)
      return InvalidArgument(field + ".name: a second context named " + context->name);
    config.contexts.push_back(std::move(*context));
  }
  return Ok();
}

Result<ClientConfig> ParseConfigRoot(const YAML::Node& root) {
  ClientConfig config;
  if (root.IsNull()) return config;
  if (!root.IsMap()) return InvalidArgument("not a mapping (current-context, contexts)");
  std::set<std::string> seen;
  for (const auto& entry : root) {
    auto key = ConfigKeyOf(entry.first, "top level");
    if (!key) return key.error();
    if (*key != "current-context" && *key != "contexts")
      return InvalidArgument("unknown key \"" + Excerpt(*key, 40) +
                             "\" (current-context, contexts)");
    if (!seen.insert(*key).second) return InvalidArgument(*key + ": repeated");
    if (*key == "contexts") {
      if (Status parsed = ParseContexts(entry.second, config); !parsed.ok()) return parsed.error();
      continue;
    }
    auto current = ConfigStringOf(entry.second, "current-context");
    if (!current) return current.error();
    config.current = std::move(*current);
  }
  if (!config.current.empty()) {
    if (Status name = CheckContextName(config.current, "current-context"); !name.ok())
      return name.error();
    if (!config.Find(config.current))
      return InvalidArgument("current-context: no context is named " + config.current);
  }
  return config;
}

// A double-quoted YAML scalar: only the quote and the backslash need escaping in text that
// CheckConfigText accepts.
std::string YamlQuoted(std::string_view value) {
  std::string out = "\"";
  for (char c : value) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

Status CheckContextName(std::string_view name, std::string_view field) {
  const std::string where(field);
  if (name.empty()) return InvalidArgument(where + ": required");
  if (name.size() > kMaxContextNameBytes)
    return InvalidArgument(where + ": longer than 63 characters: " + Excerpt(name));
  const auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  bool valid = alnum(name.front());
  for (char c : name)
    valid = valid && (alnum(c) || c == '.' || c == '_' || c == '-');
  if (!valid)
    return InvalidArgument(where + ": " + Excerpt(name) +
                           " is not a name (a-z, 0-9, '.', '_', '-', starting with a-z or 0-9)");
  return Ok();
}

Status CheckClientContext(const ClientContext& context, std::string_view field) {
  const std::string at(field);
  if (Status name = CheckContextName(context.name, at + ".name"); !name.ok()) return name;
  if (context.server.empty()) return InvalidArgument(at + ".server: required");
  if (Status text = CheckConfigText(context.server, at + ".server"); !text.ok()) return text;
  if (auto endpoint = ParseServer(context.server); !endpoint)
    return endpoint.error().WithContext(at + ".server");
  const std::pair<const std::string*, const char*> paths[] = {{&context.token_file, "token-file"},
                                                              {&context.ca_file, "ca-file"},
                                                              {&context.client_cert, "client-cert"},
                                                              {&context.client_key, "client-key"}};
  for (const auto& [value, key] : paths) {
    const bool required = value == &context.token_file;
    if (Status path = CheckConfigPath(*value, at + "." + key, required); !path.ok()) return path;
  }
  if (context.client_cert.empty() != context.client_key.empty())
    return InvalidArgument(at + ": client-cert and client-key go together");
  return Ok();
}

Result<ClientConfig> ParseClientConfig(std::string_view text) {
  // A config of kMaxClientContexts contexts is about 16 nodes each, three levels deep.
  YamlBounds bounds;
  bounds.max_nodes = 32 + kMaxClientContexts * 16;
  bounds.max_depth = 4;
  auto loaded = LoadBoundedYaml(text, bounds);
  if (!loaded) return loaded.error().WithContext("client config");
  try {
    auto config = ParseConfigRoot(*loaded);
    if (!config) return config.error().WithContext("client config");
    return config;
  } catch (const YAML::Exception& e) {
    return InvalidArgument("client config: " + Excerpt(e.what(), 200));
  }
}

std::string FormatClientConfig(const ClientConfig& config) {
  std::string out =
      "# The tessera client's contexts (tessera login, tessera config). Tokens are not kept\n"
      "# here, only the files that hold them.\n";
  if (!config.current.empty()) out += "current-context: " + YamlQuoted(config.current) + "\n";
  if (config.contexts.empty()) return out + "contexts: []\n";
  out += "contexts:\n";
  for (const auto& context : config.contexts) {
    out += "  - name: " + YamlQuoted(context.name) + "\n";
    out += "    server: " + YamlQuoted(context.server) + "\n";
    out += "    token-file: " + YamlQuoted(context.token_file) + "\n";
    if (!context.ca_file.empty()) out += "    ca-file: " + YamlQuoted(context.ca_file) + "\n";
    if (!context.client_cert.empty())
      out += "    client-cert: " + YamlQuoted(context.client_cert) + "\n";
    if (!context.client_key.empty())
      out += "    client-key: " + YamlQuoted(context.client_key) + "\n";
  }
  return out;
}

}  // namespace tessera::client

// kubeconfig (YAML, parsed with yaml-cpp) and in-cluster service-account configuration.
#include "kubernetes/kubeconfig.h"

#include <yaml-cpp/yaml.h>

#include <cstdlib>

#include "common/bounded_file.h"
#include "common/bounded_yaml.h"
#include "kubernetes/client.h"

namespace tessera::k8s {
namespace {

constexpr size_t kMaxKubeconfigBytes = size_t{4} << 20;

// kubeconfig embeds certificates base64-encoded (*-data fields).
Result<std::string> Base64Decode(const std::string& in, const std::string& field) {
  static const std::string chars =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  int value = 0, bits = -8;
  for (char c : in) {
    if (c == '=' || c == '\n' || c == '\r' || c == ' ') continue;
    auto pos = chars.find(c);
    if (pos == std::string::npos) return InvalidArgument(field + ": not base64");
    value = (value << 6) + int(pos);
    bits += 6;
    if (bits >= 0) {
      out.push_back(char((value >> bits) & 0xff));
      bits -= 8;
    }
  }
  return out;
}

std::string Str(const YAML::Node& node, const char* key) {
  if (!node || !node.IsMap() || !node[key] || !node[key].IsScalar()) return "";
  return node[key].as<std::string>();
}

std::string Resolve(const std::string& base_dir, const std::string& path) {
  if (path.empty() || path[0] == '/' || base_dir.empty()) return path;
  return base_dir + "/" + path;
}

// The entry named `name` in a list of {name, <kind>: {...}}.
YAML::Node Named(const YAML::Node& list, const std::string& name, const char* kind) {
  if (!list || !list.IsSequence()) return YAML::Node();
  for (const auto& item : list) {
    if (item.IsMap() && Str(item, "name") == name) return item[kind];
  }
  return YAML::Node();
}

}  // namespace

Result<ClientConfig> ParseKubeconfig(std::string_view yaml, const std::string& base_dir,
                                     const std::string& context) {
  auto loaded = LoadBoundedYaml(yaml);
  if (!loaded) return loaded.error().WithContext("kubeconfig");
  const YAML::Node root = std::move(*loaded);
  if (!root.IsMap()) return InvalidArgument("kubeconfig: not a mapping");
  try {
    std::string context_name = context.empty() ? Str(root, "current-context") : context;
    if (context_name.empty()) return InvalidArgument("kubeconfig: no current-context");
    YAML::Node ctx = Named(root["contexts"], context_name, "context");
    if (!ctx.IsMap())
      return NotFound("kubeconfig: context \"" + context_name + "\" not in contexts");
    std::string cluster_name = Str(ctx, "cluster");
    std::string user_name = Str(ctx, "user");
    YAML::Node cluster = Named(root["clusters"], cluster_name, "cluster");
    if (!cluster.IsMap())
      return NotFound("kubeconfig: cluster \"" + cluster_name + "\" not in clusters");

    ClientConfig config;
    config.server = Str(cluster, "server");
    if (config.server.empty())
      return InvalidArgument("kubeconfig: clusters[" + cluster_name + "].cluster.server is empty");
    while (!config.server.empty() && config.server.back() == '/')
      config.server.pop_back();
    if (auto data = Str(cluster, "certificate-authority-data"); !data.empty()) {
      auto pem = Base64Decode(data, "certificate-authority-data");
      if (!pem) return pem.error();
      config.ca_pem = *pem;
    }
    config.ca_file = Resolve(base_dir, Str(cluster, "certificate-authority"));
    config.insecure_skip_tls_verify = Str(cluster, "insecure-skip-tls-verify") == "true";
    config.tls_server_name = Str(cluster, "tls-server-name");

    if (!user_name.empty()) {
      YAML::Node user = Named(root["users"], user_name, "user");
      if (!user.IsMap()) return NotFound("kubeconfig: user \"" + user_name + "\" not in users");
      config.bearer_token = Str(user, "token");
      config.token_file = Resolve(base_dir, Str(user, "tokenFile"));
      if (auto data = Str(user, "client-certificate-data"); !data.empty()) {
        auto pem = Base64Decode(data, "client-certificate-data");
        if (!pem) return pem.error();
        config.client_cert_pem = *pem;
      }
      if (auto data = Str(user, "client-key-data"); !data.empty()) {
        auto pem = Base64Decode(data, "client-key-data");
        if (!pem) return pem.error();
        config.client_key_pem = *pem;
      }
      config.client_cert_file = Resolve(base_dir, Str(user, "client-certificate"));
      config.client_key_file = Resolve(base_dir, Str(user, "client-key"));
      if (user["exec"] || user["auth-provider"])
        return InvalidArgument("kubeconfig: user \"" + user_name +
                               "\" uses exec/auth-provider credentials, which tessera does not "
                               "run; use a token or client certificate");
    }
    return config;
  } catch (const YAML::Exception& e) {
    return InvalidArgument("kubeconfig: " + std::string(e.what()));
  }
}

Result<ClientConfig> LoadKubeconfig(const std::string& path, const std::string& context) {
  // Embedded certificates make kubeconfigs larger than most configs.
  auto text = ReadBoundedFile(path, kMaxKubeconfigBytes);
  if (!text) return text.error().WithContext("kubeconfig");
  auto slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  auto config = ParseKubeconfig(*text, dir, context);
  if (!config) return config.error().WithContext(path);
  return config;
}

Result<ClientConfig> InClusterConfig(const std::string& service_account_dir) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (!host || !port || !*host || !*port)
    return FailedPrecondition(
        "in-cluster config: KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT not set");
  ClientConfig config;
  std::string h = host;
  if (h.find(':') != std::string::npos) h = "[" + h + "]";  // IPv6 service address
  config.server = "https://" + h + ":" + port;
  config.token_file = service_account_dir + "/token";
  config.ca_file = service_account_dir + "/ca.crt";
  auto token = ReadBoundedFile(config.token_file, kMaxTokenFileBytes);
  if (!token) return token.error().WithContext("in-cluster config");
  return config;
}

}  // namespace tessera::k8s

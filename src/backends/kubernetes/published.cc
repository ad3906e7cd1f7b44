// Published ports: the Service and the ingress policies of one container, the operator's ingress
// source, and the Pod's ports and readiness probe (published.h).
#include "backends/kubernetes/published.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <set>

#include "common/untrusted_text.h"

namespace tessera::k8s {
namespace {

// "ADDRESS/PREFIX" with an IPv4 or IPv6 address and a prefix length in range.
bool IsCidr(const std::string& text) {
  const auto slash = text.find('/');
  if (slash == std::string::npos || slash + 1 >= text.size() || text.size() > 64) return false;
  const std::string address = text.substr(0, slash);
  unsigned char buffer[16];
  int max = 0;
  if (inet_pton(AF_INET, address.c_str(), buffer) == 1) max = 32;
  if (inet_pton(AF_INET6, address.c_str(), buffer) == 1) max = 128;
  if (max == 0) return false;
  int prefix = -1;
  const char* end = text.data() + text.size();
  auto [at, error] = std::from_chars(text.data() + slash + 1, end, prefix);
  return error == std::errc() && at == end && prefix >= 0 && prefix <= max;
}

bool IsLabelName(std::string_view name) {
  if (name.empty() || name.size() > 63) return false;
  auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  return alnum(name.front()) && alnum(name.back()) &&
         std::all_of(name.begin(), name.end(),
                     [&](char c) { return alnum(c) || c == '-' || c == '_' || c == '.'; });
}

bool IsDnsSubdomain(std::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  auto lower_alnum = [](char c) {
    return std::islower(static_cast<unsigned char>(c)) ||
           std::isdigit(static_cast<unsigned char>(c));
  };
  return lower_alnum(name.front()) && lower_alnum(name.back()) &&
         std::all_of(name.begin(), name.end(),
                     [&](char c) { return lower_alnum(c) || c == '-' || c == '.'; });
}

// A label key: [DNS subdomain "/"] name.
bool IsLabelKey(std::string_view key) {
  const auto slash = key.find('/');
  if (slash == std::string_view::npos) return IsLabelName(key);
  return IsDnsSubdomain(key.substr(0, slash)) && IsLabelName(key.substr(slash + 1));
}

bool IsLabelValue(std::string_view value) {
  return value.empty() || IsLabelName(value);
}

std::vector<std::string> SplitCommas(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const auto comma = text.find(',', start);
    out.push_back(
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

// An IANA service name, as a container port's name must be.
bool IsIanaServiceName(const std::string& name) {
  if (name.empty() || name.size() > 15 || name.front() == '-' || name.back() == '-' ||
      name.find("--") != std::string::npos)
    return false;
  bool letter = false;
  for (char c : name) {
    if (std::islower(static_cast<unsigned char>(c))) {
      letter = true;
    } else if (!std::isdigit(static_cast<unsigned char>(c)) && c != '-') {
      return false;
    }
  }
  return letter;
}

std::string UpperProtocol(const std::string& protocol) {
  return protocol == "udp" ? "UDP" : "TCP";
}

std::string ServicePortName(const ContainerPort& port) {
  return port.name.empty() ? port.protocol + "-" + std::to_string(port.port) : port.name;
}

Json PublishedLabels(const Publication& p) {
  Json labels = p.labels;
  labels[kManagedBy] = "tessera";
  labels[kTenancyLabel] = p.tenancy;
  return labels;
}

Json PublishedMetadata(const Publication& p, const std::string& name) {
  return {{"name", name}, {"namespace", "tenant-" + p.tenancy}, {"labels", PublishedLabels(p)}};
}

}  // namespace

Result<ServiceType> ParseServiceType(std::string_view name) {
  if (name == "ClusterIP") return ServiceType::kClusterIP;
  if (name == "NodePort") return ServiceType::kNodePort;
  if (name == "LoadBalancer") return ServiceType::kLoadBalancer;
  return InvalidArgument("--publish-service-type \"" + Excerpt(name) +
                         "\": expected ClusterIP, NodePort or LoadBalancer");
}

const char* ServiceTypeName(ServiceType type) {
  switch (type) {
    case ServiceType::kNodePort:
      return "NodePort";
    case ServiceType::kLoadBalancer:
      return "LoadBalancer";
    case ServiceType::kClusterIP:
      break;
  }
  return "ClusterIP";
}

Result<IngressSources> ParseIngressSources(const std::vector<std::string>& values) {
  IngressSources out;
  for (const auto& value : values) {
    const std::string what = "--publish-ingress-from \"" + Excerpt(value) + "\"";
    if (value.find('=') == std::string::npos) {
      for (const auto& cidr : SplitCommas(value)) {
        if (!IsCidr(cidr))
          return InvalidArgument(what +
                                 ": want CIDRs (10.0.0.0/8) or a namespace label selector "
                                 "(kubernetes.io/metadata.name=ingress-nginx)");
        out.cidrs.push_back(cidr);
      }
      continue;
    }
    std::map<std::string, std::string> selector;
    for (const auto& label : SplitCommas(value)) {
      const auto equals = label.find('=');
      if (equals == std::string::npos || !IsLabelKey(label.substr(0, equals)) ||
          !IsLabelValue(label.substr(equals + 1)))
        return InvalidArgument(what + ": want KEY=VALUE labels (a namespace label selector)");
      selector[label.substr(0, equals)] = label.substr(equals + 1);
    }
    out.namespaces.push_back(std::move(selector));
  }
  return out;
}

Status CheckContainerPorts(const std::vector<ContainerPort>& ports,
                           const std::optional<HttpReadiness>& ready) {
  std::set<std::pair<std::string, int>> seen;
  std::set<std::string> names;
  for (const auto& p : ports) {
    const std::string what = "port " + std::to_string(p.port);
    if (p.port < 1 || p.port > 65535) return InvalidArgument(what + ": want 1..65535");
    if (p.protocol != "tcp" && p.protocol != "udp")
      return InvalidArgument(what + ": protocol \"" + Excerpt(p.protocol) + "\": want tcp or udp");
    if (!seen.emplace(p.protocol, p.port).second)
      return InvalidArgument(what + "/" + p.protocol + ": given twice");
    if (!p.name.empty() && !IsIanaServiceName(p.name))
      return InvalidArgument(what + ": name \"" + Excerpt(p.name) +
                             "\": want at most 15 lower-case letters, digits and '-' with a "
                             "letter");
    if (!p.name.empty() && !names.insert(p.name).second)
      return InvalidArgument(what + ": name \"" + p.name + "\" given twice");
  }
  if (!ready) return Ok();
  const std::string& path = ready->path;
  if (path.empty() || path.front() != '/' || path.size() > 256 ||
      !std::all_of(path.begin(), path.end(), [](char c) { return c > ' ' && c < 127; }))
    return InvalidArgument("readiness probe: path \"" + Excerpt(path) +
                           "\": want an absolute printable path of at most 256 bytes");
  if (!seen.count({"tcp", ready->port}))
    return InvalidArgument("readiness probe: port " + std::to_string(ready->port) +
                           " is not one of the container's TCP ports");
  return Ok();
}

void AddPortsAndProbe(Json& container, const std::vector<ContainerPort>& ports,
                      const std::optional<HttpReadiness>& ready) {
  if (!ports.empty()) {
    Json list = Json::array();
    for (const auto& p : ports) {
      Json port = {{"containerPort", p.port}, {"protocol", UpperProtocol(p.protocol)}};
      if (!p.name.empty()) port["name"] = p.name;
      list.push_back(port);
    }
    container["ports"] = list;
  }
  if (ready) {
    // Ready after one answer; not ready after three failures in a row, 15 s.
    container["readinessProbe"] = {{"httpGet", {{"path", ready->path}, {"port", ready->port}}},
                                   {"periodSeconds", 5},
                                   {"timeoutSeconds", 2},
                                   {"successThreshold", 1},
                                   {"failureThreshold", 3}};
  }
}

Result<Json> BuildService(const Publication& p) {
  if (p.ports.empty()) return InvalidArgument("service " + p.name + ": no ports");
  Json ports = Json::array();
  std::set<std::string> names;
  for (const auto& port : p.ports) {
    const std::string name = ServicePortName(port);
    if (!names.insert(name).second)
      return InvalidArgument("service " + p.name + ": port name \"" + name + "\" given twice");
    ports.push_back({{"name", name},
                     {"protocol", UpperProtocol(port.protocol)},
                     {"port", port.port},
                     {"targetPort", port.port}});
  }
  Json spec = {{"type", ServiceTypeName(p.type)}, {"selector", p.labels}, {"ports", ports}};
  if (p.type != ServiceType::kClusterIP) spec["externalTrafficPolicy"] = "Local";
  return Json{{"apiVersion", "v1"},
              {"kind", "Service"},
              {"metadata", PublishedMetadata(p, p.name)},
              {"spec", spec}};
}

std::string PublishedPolicyName(const std::string& pod_name) {
  return "published-" + pod_name;
}

Json BuildPublishedNetworkPolicy(const Publication& p) {
  Json from = Json::array();
  for (const auto& cidr : p.ingress.cidrs)
    from.push_back({{"ipBlock", {{"cidr", cidr}}}});
  for (const auto& labels : p.ingress.namespaces) {
    from.push_back({{"namespaceSelector",
                     {{"matchLabels", labels},
                      {"matchExpressions",
                       Json::array({{{"key", kTenancyLabel}, {"operator", "DoesNotExist"}}})}}}});
  }
  Json ports = Json::array();
  for (const auto& port : p.ports)
    ports.push_back({{"protocol", UpperProtocol(port.protocol)}, {"port", port.port}});
  return {{"apiVersion", "networking.k8s.io/v1"},
          {"kind", "NetworkPolicy"},
          {"metadata", PublishedMetadata(p, PublishedPolicyName(p.name))},
          {"spec",
           {{"podSelector", {{"matchLabels", p.labels}}},
            {"policyTypes", Json::array({"Ingress"})},
            {"ingress", Json::array({{{"from", from}, {"ports", ports}}})}}}};
}

Json BuildPublishedCiliumNetworkPolicy(const Publication& p) {
  Json ports = Json::array();
  for (const auto& port : p.ports)
    ports.push_back(
        {{"port", std::to_string(port.port)}, {"protocol", UpperProtocol(port.protocol)}});
  const Json to_ports = Json::array({{{"ports", ports}}});
  Json ingress = Json::array();
  if (!p.ingress.cidrs.empty())
    ingress.push_back({{"fromCIDR", p.ingress.cidrs}, {"toPorts", to_ports}});
  // Cilium sees a namespace's labels as io.cilium.k8s.namespace.labels.<key> on its endpoints.
  const std::string ns_label = "k8s:io.cilium.k8s.namespace.labels.";
  Json endpoints = Json::array();
  for (const auto& labels : p.ingress.namespaces) {
    Json match = Json::object();
    for (const auto& [key, value] : labels)
      match[ns_label + key] = value;
    endpoints.push_back({{"matchLabels", match},
                         {"matchExpressions", Json::array({{{"key", ns_label + kTenancyLabel},
                                                            {"operator", "DoesNotExist"}}})}});
  }
  if (!endpoints.empty()) ingress.push_back({{"fromEndpoints", endpoints}, {"toPorts", to_ports}});
  Json selector = Json::object();
  for (auto it = p.labels.begin(); it != p.labels.end(); ++it)
    selector["k8s:" + it.key()] = it.value();
  return {{"apiVersion", "cilium.io/v2"},
          {"kind", "CiliumNetworkPolicy"},
          {"metadata", PublishedMetadata(p, PublishedPolicyName(p.name))},
          {"spec", {{"endpointSelector", {{"matchLabels", selector}}}, {"ingress", ingress}}}};
}

Json PodOwnerReference(const std::string& name, const std::string& uid) {
  return {{"apiVersion", "v1"}, {"kind", "Pod"}, {"name", name}, {"uid", uid}};
}

Resource ServicesResource() {
  return {"/api/v1", "services", true};
}

}  // namespace tessera::k8s

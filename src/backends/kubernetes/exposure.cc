// Reading a container's Service and Pod back for Exposed (published.h): every field the API server
// sends is checked for its type and bounded before it is used.
#include <arpa/inet.h>

#include <cctype>

#include "backends/kubernetes/published.h"

namespace tessera::k8s {
namespace {

constexpr size_t kMaxListedPorts = 64;     // a Service's or a container's
constexpr size_t kMaxIngressEntries = 16;  // status.loadBalancer.ingress
constexpr size_t kMaxPodConditions = 64;   // status.conditions
constexpr size_t kMaxShortField = 63;      // names, types, protocols, condition types
constexpr size_t kMaxHostnameField = 253;  // a load balancer's hostname

bool IsIpLiteral(const std::string& text) {
  unsigned char buffer[16];
  return text.size() <= 45 && (inet_pton(AF_INET, text.c_str(), buffer) == 1 ||
                               inet_pton(AF_INET6, text.c_str(), buffer) == 1);
}

bool IsHostname(const std::string& text) {
  if (text.empty() || text.size() > kMaxHostnameField) return false;
  for (char c : text) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.') return false;
  }
  return true;
}

// object[key]: absent → "", else a string of at most `max` bytes.
Result<std::string> BoundedText(const Json& object, const char* key, size_t max,
                                const std::string& field) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return std::string();
  if (!it->is_string()) return InvalidArgument(field + ": not a string");
  if (it->get_ref<const std::string&>().size() > max)
    return InvalidArgument(field + ": longer than " + std::to_string(max) + " bytes");
  return it->get<std::string>();
}

// object[key]: absent → 0, else an integer in min..65535.
Result<int> PortNumber(const Json& object, const char* key, int min, const std::string& field) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return 0;
  if (!it->is_number_integer() || it->get<int64_t>() < min || it->get<int64_t>() > 65535)
    return InvalidArgument(field + ": want an integer " + std::to_string(min) + "..65535");
  return static_cast<int>(it->get<int64_t>());
}

Result<std::string> LowerProtocol(const Json& object, const std::string& field) {
  auto protocol = BoundedText(object, "protocol", kMaxShortField, field + ".protocol");
  if (!protocol) return protocol.error();
  if (protocol->empty() || *protocol == "TCP") return std::string("tcp");
  if (*protocol == "UDP") return std::string("udp");
  return InvalidArgument(field + ".protocol: want TCP or UDP");
}

// An object's member `key` as an array of at most `max` objects (absent: empty).
Result<const Json*> ObjectArray(const Json& object, const char* key, size_t max,
                                const std::string& field) {
  static const Json kEmpty = Json::array();
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return &kEmpty;
  if (!it->is_array() || it->size() > max)
    return InvalidArgument(field + ": want an array of at most " + std::to_string(max));
  for (const auto& item : *it)
    if (!item.is_object()) return InvalidArgument(field + ": want objects");
  return &*it;
}

// The first address of status.loadBalancer.ingress (its IP, else its hostname); "" until one is
// assigned.
Result<std::string> LoadBalancerAddress(const Json& status) {
  const Json& lb = ObjectField(status, "loadBalancer");
  auto ingress = ObjectArray(lb, "ingress", kMaxIngressEntries, "status.loadBalancer.ingress");
  if (!ingress) return ingress.error();
  if ((*ingress)->empty()) return std::string();
  const Json& first = (**ingress)[0];
  auto ip = BoundedText(first, "ip", 45, "status.loadBalancer.ingress[0].ip");
  if (!ip) return ip.error();
  if (!ip->empty()) {
    if (!IsIpLiteral(*ip))
      return InvalidArgument("status.loadBalancer.ingress[0].ip: not an IP address");
    return *ip;
  }
  auto hostname =
      BoundedText(first, "hostname", kMaxHostnameField, "status.loadBalancer.ingress[0].hostname");
  if (!hostname) return hostname.error();
  if (!hostname->empty() && !IsHostname(*hostname))
    return InvalidArgument("status.loadBalancer.ingress[0].hostname: not a host name");
  return *hostname;
}

}  // namespace

Result<std::vector<ServiceAddress>> ServiceAddressesOf(const Json& service,
                                                       const std::string& host_ip) {
  if (!service.is_object()) return InvalidArgument("service: not an object");
  const Json& spec = ObjectField(service, "spec");
  auto type_name = BoundedText(spec, "type", kMaxShortField, "spec.type");
  if (!type_name) return type_name.error();
  auto type = ParseServiceType(type_name->empty() ? "ClusterIP" : *type_name);
  if (!type) return InvalidArgument("spec.type: want ClusterIP, NodePort or LoadBalancer");
  auto cluster_ip = BoundedText(spec, "clusterIP", 45, "spec.clusterIP");
  if (!cluster_ip) return cluster_ip.error();
  if (!cluster_ip->empty() && *cluster_ip != "None" && !IsIpLiteral(*cluster_ip))
    return InvalidArgument("spec.clusterIP: not an IP address");
  std::string host;
  if (*type == ServiceType::kClusterIP && *cluster_ip != "None") host = *cluster_ip;
  if (*type == ServiceType::kNodePort) host = host_ip;
  if (*type == ServiceType::kLoadBalancer) {
    auto address = LoadBalancerAddress(ObjectField(service, "status"));
    if (!address) return address.error();
    host = *address;
  }
  auto ports = ObjectArray(spec, "ports", kMaxListedPorts, "spec.ports");
  if (!ports) return ports.error();
  std::vector<ServiceAddress> out;
  for (size_t i = 0; i < (*ports)->size(); ++i) {
    const Json& port = (**ports)[i];
    const std::string field = "spec.ports[" + std::to_string(i) + "]";
    ServiceAddress address;
    auto number = PortNumber(port, "port", 1, field + ".port");
    auto target = PortNumber(port, "targetPort", 1, field + ".targetPort");
    auto node_port = PortNumber(port, "nodePort", 0, field + ".nodePort");
    auto name = BoundedText(port, "name", kMaxShortField, field + ".name");
    auto protocol = LowerProtocol(port, field);
    if (!number) return number.error();
    if (!target) return target.error();
    if (!node_port) return node_port.error();
    if (!name) return name.error();
    if (!protocol) return protocol.error();
    if (*number == 0) return InvalidArgument(field + ".port: missing");
    address.container_port = *target != 0 ? *target : *number;
    address.protocol = *protocol;
    address.name = *name;
    const int reached = *type == ServiceType::kNodePort ? *node_port : *number;
    if (!host.empty() && reached != 0) {
      address.host = host;
      address.host_port = reached;
    }
    out.push_back(std::move(address));
  }
  return out;
}

Result<PodExposure> PodExposureOf(const Json& pod) {
  if (!pod.is_object()) return InvalidArgument("pod: not an object");
  PodExposure out;
  const Json& status = ObjectField(pod, "status");
  auto host_ip = BoundedText(status, "hostIP", 45, "pod status.hostIP");
  if (!host_ip) return host_ip.error();
  if (!host_ip->empty() && !IsIpLiteral(*host_ip))
    return InvalidArgument("pod status.hostIP: not an IP address");
  out.host_ip = *host_ip;
  auto conditions = ObjectArray(status, "conditions", kMaxPodConditions, "pod status.conditions");
  if (!conditions) return conditions.error();
  for (const auto& condition : **conditions) {
    auto type = BoundedText(condition, "type", kMaxShortField, "pod condition type");
    auto value = BoundedText(condition, "status", kMaxShortField, "pod condition status");
    if (!type) return type.error();
    if (!value) return value.error();
    if (*type == "Ready") out.ready = *value == "True";
  }
  auto containers =
      ObjectArray(ObjectField(pod, "spec"), "containers", kMaxListedPorts, "pod spec.containers");
  if (!containers) return containers.error();
  if ((*containers)->empty()) return out;
  auto ports =
      ObjectArray((**containers)[0], "ports", kMaxListedPorts, "pod spec.containers[0].ports");
  if (!ports) return ports.error();
  for (const auto& port : **ports) {
    ContainerPort p;
    auto number = PortNumber(port, "containerPort", 1, "pod containerPort");
    auto name = BoundedText(port, "name", kMaxShortField, "pod container port name");
    auto protocol = LowerProtocol(port, "pod container port");
    if (!number) return number.error();
    if (!name) return name.error();
    if (!protocol) return protocol.error();
    p.port = *number;
    p.name = *name;
    p.protocol = *protocol;
    out.ports.push_back(std::move(p));
  }
  return out;
}

}  // namespace tessera::k8s

// Published ports and readiness in API bodies (see ports_json.h).
#include "api/ports_json.h"

#include <set>
#include <string>
#include <utility>

#include "common/strict_json.h"
#include "common/untrusted_text.h"

namespace tessera::api {
namespace {

using nlohmann::json;

constexpr size_t kMaxPortName = 15;
constexpr size_t kMaxProbePath = 256;

// A Kubernetes Service port's name (IANA_SVC_NAME): a DNS-1123 label of at most 15 characters
// with at least one letter, so the same spec runs on either backend.
std::string CheckPortName(std::string_view name) {
  if (name.empty() || name.size() > kMaxPortName) return "must be 1..15 characters";
  bool letter = false;
  for (char c : name) {
    if (c >= 'a' && c <= 'z') {
      letter = true;
    } else if (!(c >= '0' && c <= '9') && c != '-') {
      return "may contain only lowercase letters, digits and '-'";
    }
  }
  if (name.front() == '-' || name.back() == '-') return "must start and end with a letter or digit";
  if (name.find("--") != std::string_view::npos) return "must not contain \"--\"";
  if (!letter) return "must contain a letter";
  return "";
}

Result<fleet::PortRequest> ParsePortRequest(const json& value, const std::string& field) {
  if (!value.is_object())
    return InvalidArgument(field + ": must be an object {\"containerPort\": 8080}");
  fleet::PortRequest port;
  bool numbered = false;
  for (const auto& item : value.items()) {
    const std::string& key = item.key();
    if (key == "containerPort") {
      auto number = JsonIntInRange(item.value(), field + ".containerPort", 1, 65535);
      if (!number) return number.error();
      port.container_port = static_cast<int>(*number);
      numbered = true;
    } else if (key == "name") {
      if (!item.value().is_string()) return InvalidArgument(field + ".name: must be a string");
      port.name = item.value().get<std::string>();
      if (auto problem = CheckPortName(port.name); !problem.empty())
        return InvalidArgument(field + ".name: \"" + Excerpt(port.name) + "\" " + problem);
    } else if (key == "protocol") {
      if (!item.value().is_string() || (item.value() != "tcp" && item.value() != "udp"))
        return InvalidArgument(field + ".protocol: want \"tcp\" or \"udp\"");
      port.protocol = item.value().get<std::string>();
    } else {
      return InvalidArgument(field + "." + Excerpt(key) +
                             ": unknown field (containerPort, name, protocol)");
    }
  }
  if (!numbered) return InvalidArgument(field + ".containerPort: required");
  return port;
}

Status CheckProbePath(const std::string& path) {
  if (path.empty() || path.front() != '/')
    return InvalidArgument("ready.httpGet.path: must start with '/'");
  if (path.size() > kMaxProbePath)
    return InvalidArgument("ready.httpGet.path: longer than " + std::to_string(kMaxProbePath) +
                           " bytes");
  // Printable ASCII without space: the path goes into a request line as it is.
  for (unsigned char c : path)
    if (c <= 0x20 || c >= 0x7f)
      return InvalidArgument("ready.httpGet.path: may contain only printable ASCII, no space");
  return Ok();
}

Result<fleet::ReadinessProbe> ParseHttpGet(const json& value) {
  if (!value.is_object())
    return InvalidArgument("ready.httpGet: must be an object {\"path\": \"/\", \"port\": 8080}");
  fleet::ReadinessProbe probe;
  bool port = false;
  for (const auto& item : value.items()) {
    const std::string& key = item.key();
    if (key == "path") {
      if (!item.value().is_string()) return InvalidArgument("ready.httpGet.path: must be a string");
      probe.path = item.value().get<std::string>();
      if (auto checked = CheckProbePath(probe.path); !checked) return checked.error();
    } else if (key == "port") {
      auto number = JsonIntInRange(item.value(), "ready.httpGet.port", 1, 65535);
      if (!number) return number.error();
      probe.port = static_cast<int>(*number);
      port = true;
    } else {
      return InvalidArgument("ready.httpGet." + Excerpt(key) + ": unknown field (path, port)");
    }
  }
  if (!port) return InvalidArgument("ready.httpGet.port: required");
  return probe;
}

}  // namespace

Result<std::vector<fleet::PortRequest>> ParsePortRequests(const json& value) {
  if (!value.is_array())
    return InvalidArgument("ports: must be an array of {\"containerPort\": N}");
  if (value.size() > fleet::kMaxPortsPerContainer)
    return InvalidArgument("ports: more than " + std::to_string(fleet::kMaxPortsPerContainer) +
                           " ports");
  std::vector<fleet::PortRequest> ports;
  std::set<std::pair<int, std::string>> seen;
  std::set<std::string> names;
  for (size_t i = 0; i < value.size(); ++i) {
    const std::string field = "ports[" + std::to_string(i) + "]";
    auto port = ParsePortRequest(value[i], field);
    if (!port) return port.error();
    if (!seen.emplace(port->container_port, port->protocol).second)
      return InvalidArgument(field + ": containerPort " + std::to_string(port->container_port) +
                             "/" + port->protocol + " is given twice");
    if (!port->name.empty() && !names.insert(port->name).second)
      return InvalidArgument(field + ".name: \"" + port->name + "\" is given twice");
    ports.push_back(std::move(*port));
  }
  return ports;
}

Result<fleet::ReadinessProbe> ParseReadinessProbe(const json& value) {
  if (!value.is_object())
    return InvalidArgument(
        "ready: must be an object {\"httpGet\": {\"path\": \"/\", \"port\": N}}");
  std::optional<fleet::ReadinessProbe> probe;
  for (const auto& item : value.items()) {
    if (item.key() != "httpGet")
      return InvalidArgument("ready." + Excerpt(item.key()) + ": unknown field (httpGet)");
    auto parsed = ParseHttpGet(item.value());
    if (!parsed) return parsed.error();
    probe = std::move(*parsed);
  }
  if (!probe) return InvalidArgument("ready.httpGet: required");
  return *probe;
}

Status CheckPortsOfSpec(const fleet::ContainerSpec& spec) {
  // Published ports forward to the container's address on its tenancy network; a container
  // without a network has nothing to forward to.
  if (!spec.ports.empty() && spec.network == tenancy::NetworkMode::kNone)
    return InvalidArgument("ports: need the tenancy network (network is \"none\")");
  if (spec.ready) {
    const bool tcp_port =
        std::any_of(spec.ports.begin(), spec.ports.end(), [&spec](const fleet::PortRequest& p) {
          return p.container_port == spec.ready->port && p.protocol == "tcp";
        });
    if (!tcp_port)
      return InvalidArgument("ready.httpGet.port: " + std::to_string(spec.ready->port) +
                             " is none of the container's tcp ports");
  }
  return Ok();
}

json PublishedPortsToJson(const fleet::ContainerRecord& record) {
  json out = json::array();
  for (size_t i = 0; i < record.spec.ports.size(); ++i) {
    fleet::PublishedPort port{record.spec.ports[i].container_port, record.spec.ports[i].protocol,
                              record.spec.ports[i].name, "", 0};
    if (i < record.published.size()) port = record.published[i];
    json entry = {{"container_port", port.container_port},
                  {"protocol", port.protocol},
                  {"name", port.name},
                  {"host_address", port.host_address},
                  {"host_port", port.host_port}};
    if (!port.host_address.empty() && port.host_port > 0) {
      // An IPv6 address in brackets, so the port stays apart from it.
      const bool v6 = port.host_address.find(':') != std::string::npos;
      entry["address"] = (v6 ? "[" + port.host_address + "]" : port.host_address) + ":" +
                         std::to_string(port.host_port);
    }
    out.push_back(std::move(entry));
  }
  return out;
}

}  // namespace tessera::api

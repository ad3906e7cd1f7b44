// The node GPU inventory annotation: what the node agent publishes on its Node and what the
// control plane places from. Pure: values in, text or JSON out.
#include "backends/kubernetes/node_gpus.h"

#include <algorithm>

#include "kubernetes/client.h"

namespace tessera::k8s {

std::string NodeGpusAnnotation(const NodeGpus& gpus) {
  Json list = Json::array();
  for (const auto& gpu : gpus.gpus) {
    Json item = {{"pci", gpu.pci_address}, {"model", gpu.model}, {"numa", gpu.numa_node}};
    if (!gpu.uuid.empty()) item["uuid"] = gpu.uuid;
    if (!gpu.upstream_bridges.empty()) item["bridges"] = gpu.upstream_bridges;
    if (gpu.health != health::GpuHealth{}) item["health"] = GpuHealthJson(gpu.health);
    list.push_back(std::move(item));
  }
  Json doc = {{"version", 1}, {"gpus", std::move(list)}};
  if (!gpus.partition_table.is_null()) doc["partitionTable"] = gpus.partition_table;
  // nlohmann::json objects keep their keys sorted: equal inventories dump to equal text. A
  // reason that is not UTF-8 (a driver's detail) is published with replacement characters.
  return doc.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Result<NodeGpus> ParseNodeGpusAnnotation(std::string_view text) {
  Json doc = Json::parse(text, nullptr, false);
  if (!doc.is_object()) return InvalidArgument("not a JSON object");
  // Checked as an integer before it is read as one: value<int>() of an array throws, and of
  // 1e300 is undefined behaviour (found by fuzz_node_gpus).
  if (!doc.contains("version") || !doc["version"].is_number_integer() ||
      doc["version"].get<int64_t>() != 1)
    return InvalidArgument(
        "version: " + (doc.contains("version") ? doc["version"].dump() : "missing") + " (want 1)");
  if (!doc.contains("gpus") || !doc["gpus"].is_array()) return InvalidArgument("gpus: missing");
  NodeGpus out;
  for (size_t i = 0; i < doc["gpus"].size(); ++i) {
    const Json& item = doc["gpus"][i];
    const std::string where = "gpus[" + std::to_string(i) + "]";
    if (!item.is_object()) return InvalidArgument(where + ": not an object");
    NodeGpu gpu;
    if (!item.contains("pci") || !item["pci"].is_string() || item["pci"].get<std::string>().empty())
      return InvalidArgument(where + ".pci: missing");
    gpu.pci_address = item["pci"].get<std::string>();
    if (item.contains("uuid") && !item["uuid"].is_string())
      return InvalidArgument(where + ".uuid: not a string");
    gpu.uuid = item.value("uuid", "");
    if (item.contains("model") && !item["model"].is_string())
      return InvalidArgument(where + ".model: not a string");
    gpu.model = item.value("model", "");
    if (item.contains("numa")) {
      const Json& numa = item["numa"];
      if (!numa.is_number_integer() || numa.get<int64_t>() < -1 || numa.get<int64_t>() > 4095)
        return InvalidArgument(where + ".numa: not an integer from -1 to 4095");
      gpu.numa_node = static_cast<int>(numa.get<int64_t>());
    }
    if (item.contains("bridges")) {
      if (!item["bridges"].is_array()) return InvalidArgument(where + ".bridges: not an array");
      for (const auto& bridge : item["bridges"]) {
        if (!bridge.is_string()) return InvalidArgument(where + ".bridges: not strings");
        gpu.upstream_bridges.push_back(bridge.get<std::string>());
      }
    }
    if (item.contains("health")) {
      auto health = ParseGpuHealthJson(item["health"]);
      if (!health) return health.error().WithContext(where + ".health");
      gpu.health = std::move(*health);
    }
    for (const auto& seen : out.gpus)
      if (seen.pci_address == gpu.pci_address)
        return InvalidArgument(where + ".pci: " + gpu.pci_address + " listed twice");
    out.gpus.push_back(std::move(gpu));
  }
  if (doc.contains("partitionTable")) {
    if (!doc["partitionTable"].is_object()) return InvalidArgument("partitionTable: not an object");
    out.partition_table = doc["partitionTable"];
  }
  return out;
}

Result<std::optional<NodeGpus>> NodeGpusOf(const Json& node) {
  // What the API server sends is read with type checks: value() throws on a wrong type.
  if (!node.is_object() || !node.contains("metadata") || !node["metadata"].is_object())
    return InvalidArgument("node: no metadata");
  const Json& metadata = node["metadata"];
  const std::string name = metadata.contains("name") && metadata["name"].is_string()
                               ? metadata["name"].get<std::string>()
                               : "";
  const Json annotations =
      metadata.contains("annotations") ? metadata["annotations"] : Json::object();
  if (!annotations.is_object() || !annotations.contains(kNodeGpusAnnotation))
    return std::optional<NodeGpus>();
  const Json& value = annotations[kNodeGpusAnnotation];
  if (!value.is_string())
    return InvalidArgument("node " + name + ": annotation " + kNodeGpusAnnotation +
                           ": not a string");
  auto parsed = ParseNodeGpusAnnotation(value.get<std::string>());
  if (!parsed)
    return parsed.error().WithContext("node " + name + ": annotation " + kNodeGpusAnnotation);
  parsed->node = name;
  return std::optional<NodeGpus>(std::move(*parsed));
}

Json NodeGpusPatch(const std::string& annotation) {
  return {{"metadata", {{"annotations", {{kNodeGpusAnnotation, annotation}}}}}};
}

std::vector<std::string> PciAddressesOfDeviceIds(const std::vector<std::string>& ids,
                                                 const NodeGpus& gpus) {
  std::vector<std::string> out;
  for (const auto& id : ids) {
    std::string physical = id.substr(0, id.find("::"));
    std::string pci = physical;
    for (const auto& gpu : gpus.gpus) {
      if (gpu.pci_address == physical || (!gpu.uuid.empty() && gpu.uuid == physical)) {
        pci = gpu.pci_address;
      }
    }
    out.push_back(std::move(pci));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace tessera::k8s

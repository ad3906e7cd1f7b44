// Loads partition tables from YAML or JSON text. YAML is first turned into the same JSON value
// the JSON parser produces (plain scalars that spell an integer become integers, quoted ones stay
// strings), so there is one place that reads fields and one set of error messages.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "common/bounded_yaml.h"
#include "common/untrusted_text.h"
#include "topology/topology.h"

namespace tessera::topology {
namespace {

using nlohmann::json;

std::optional<json> IntegerScalar(const std::string& text) {
  if (text.empty() || text.size() > 20) return std::nullopt;
  size_t start = (text[0] == '-' || text[0] == '+') ? 1 : 0;
  if (start == text.size()) return std::nullopt;
  for (size_t i = start; i < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9') return std::nullopt;
  }
  errno = 0;
  if (text[0] == '-') {
    long long value = std::strtoll(text.c_str(), nullptr, 10);
    if (errno == ERANGE) return std::nullopt;
    return json(value);
  }
  unsigned long long value = std::strtoull(text.c_str() + start, nullptr, 10);
  if (errno == ERANGE) return std::nullopt;
  return json(value);
}

Result<json> YamlToJson(const YAML::Node& node, const std::string& where) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return json(nullptr);
    case YAML::NodeType::Scalar: {
      const std::string& text = node.Scalar();
      if (node.Tag() == "?") {  // plain (unquoted) scalar
        if (auto number = IntegerScalar(text)) return *number;
      }
      return json(text);
    }
    case YAML::NodeType::Sequence: {
      json out = json::array();
      size_t i = 0;
      for (const auto& item : node) {
        auto value = YamlToJson(item, where + "[" + std::to_string(i++) + "]");
        if (!value) return value.error();
        out.push_back(std::move(*value));
      }
      return out;
    }
    case YAML::NodeType::Map: {
      json out = json::object();
      for (const auto& item : node) {
        if (!item.first.IsScalar()) {
          return InvalidArgument(where + ": mapping keys must be plain names or numbers");
        }
        const std::string key = item.first.Scalar();
        // Paths name keys by excerpt: a long key would otherwise be copied into every path below.
        const std::string shown = Excerpt(key, 40);
        if (out.contains(key)) return InvalidArgument(where + ": duplicate key \"" + shown + "\"");
        auto value = YamlToJson(item.second, where.empty() ? shown : where + "." + shown);
        if (!value) return value.error();
        out[key] = std::move(*value);
      }
      return out;
    }
  }
  return InvalidArgument(where + ": unsupported YAML node");
}

std::string Field(const std::string& parent, const std::string& name) {
  return parent.empty() ? name : parent + "." + name;
}

Status RejectUnknown(const json& object, const std::string& where,
                     std::initializer_list<const char*> known) {
  for (auto it = object.begin(); it != object.end(); ++it) {
    const std::string& key = it.key();  // not a structured binding: clang-14 cannot capture one
    if (std::none_of(known.begin(), known.end(), [&](const char* k) { return key == k; })) {
      std::string list;
      for (const char* k : known)
        list += (list.empty() ? "" : ", ") + std::string(k);
      return InvalidArgument(Field(where, Excerpt(key, 40)) + ": unknown field (known: " + list +
                             ")");
    }
  }
  return Ok();
}

Result<int64_t> Integer(const json& value, const std::string& where, int64_t min, int64_t max) {
  if (!value.is_number_integer()) {
    // Strings from YAML may hold any bytes; dump() would throw on invalid UTF-8.
    return InvalidArgument(where + ": expected an integer, got " +
                           Excerpt(value.dump(-1, ' ', false, json::error_handler_t::replace), 60));
  }
  if (value.is_number_unsigned()) {
    uint64_t v = value.get<uint64_t>();
    if (v > static_cast<uint64_t>(max)) {
      return InvalidArgument(where + ": " + std::to_string(v) + " is out of range (" +
                             std::to_string(min) + ".." + std::to_string(max) + ")");
    }
    return static_cast<int64_t>(v);
  }
  int64_t v = value.get<int64_t>();
  if (v < min || v > max) {
    return InvalidArgument(where + ": " + std::to_string(v) + " is out of range (" +
                           std::to_string(min) + ".." + std::to_string(max) + ")");
  }
  return v;
}

Result<PartitionTable> TableFromJson(const json& doc) {
  if (!doc.is_object()) return InvalidArgument("table: expected an object at the top level");
  if (auto s = RejectUnknown(doc, "", {"board", "modules", "partitions", "pci_addresses"}); !s) {
    return s.error();
  }
  PartitionTable table;
  if (doc.contains("board")) {
    if (!doc["board"].is_string()) return InvalidArgument("board: expected a string");
    table.board = doc["board"].get<std::string>();
  }
  if (!doc.contains("modules"))
    return InvalidArgument("modules: missing (GPU modules on the board)");
  auto modules = Integer(doc["modules"], "modules", 1, kMaxModules);
  if (!modules) return modules.error();
  table.module_count = static_cast<int>(*modules);

  if (!doc.contains("partitions")) return InvalidArgument("partitions: missing");
  const json& partitions = doc["partitions"];
  if (!partitions.is_array()) return InvalidArgument("partitions: expected a list");
  for (size_t i = 0; i < partitions.size(); ++i) {
    const std::string where = "partitions[" + std::to_string(i) + "]";
    const json& p = partitions[i];
    if (!p.is_object()) return InvalidArgument(where + ": expected an object with id and gpus");
    if (auto s = RejectUnknown(p, where, {"id", "gpus"}); !s) return s.error();
    if (!p.contains("id")) return InvalidArgument(where + ".id: missing");
    if (!p.contains("gpus")) return InvalidArgument(where + ".gpus: missing");
    auto id = Integer(p["id"], where + ".id", 0, UINT32_MAX);
    if (!id) return id.error();
    const json& gpus = p["gpus"];
    if (!gpus.is_array()) return InvalidArgument(where + ".gpus: expected a list of module IDs");
    FabricPartition partition;
    partition.id = static_cast<uint32_t>(*id);
    for (size_t j = 0; j < gpus.size(); ++j) {
      auto module =
          Integer(gpus[j], where + ".gpus[" + std::to_string(j) + "]", INT32_MIN, INT32_MAX);
      if (!module) return module.error();
      partition.modules.push_back(static_cast<int>(*module));
    }
    table.partitions.push_back(std::move(partition));
  }

  if (doc.contains("pci_addresses")) {
    const json& pci = doc["pci_addresses"];
    if (!pci.is_object()) {
      return InvalidArgument("pci_addresses: expected a map of module ID to PCI address");
    }
    for (const auto& [key, value] : pci.items()) {
      const std::string where = "pci_addresses[" + Excerpt(key, 40) + "]";
      auto module = IntegerScalar(key);
      if (!module) return InvalidArgument(where + ": key must be a module ID");
      auto number = Integer(*module, where, INT32_MIN, INT32_MAX);
      if (!number) return number.error();
      if (!value.is_string()) return InvalidArgument(where + ": expected a PCI address string");
      table.pci_addresses[static_cast<int>(*number)] = value.get<std::string>();
    }
  }
  if (auto valid = ValidatePartitionTable(table); !valid) return valid.error();
  for (auto& partition : table.partitions) {
    std::sort(partition.modules.begin(), partition.modules.end());
  }
  return table;
}

}  // namespace

Result<PartitionTable> ParsePartitionTable(std::string_view text, TableFormat format) {
  json doc;
  if (format == TableFormat::kJson) {
    if (auto nesting = CheckJsonNesting(text, "table"); !nesting) {
      return nesting.error().WithContext("JSON");
    }
    try {
      doc = json::parse(text.begin(), text.end());
    } catch (const json::exception& e) {
      return InvalidArgument(std::string("JSON: ") + e.what());
    }
  } else {
    auto root = LoadBoundedYaml(text);
    if (!root) return root.error();
    try {
      auto converted = YamlToJson(*root, "");
      if (!converted) return converted.error();
      doc = std::move(*converted);
    } catch (const YAML::Exception& e) {
      return InvalidArgument(std::string("YAML: ") + e.what());
    }
  }
  return TableFromJson(doc);
}

Result<PartitionTable> ParsePartitionTableFile(std::string_view file_name, std::string_view text) {
  auto ends_with = [&](std::string_view suffix) {
    return file_name.size() >= suffix.size() &&
           file_name.substr(file_name.size() - suffix.size()) == suffix;
  };
  TableFormat format;
  if (ends_with(".json")) {
    format = TableFormat::kJson;
  } else if (ends_with(".yaml") || ends_with(".yml")) {
    format = TableFormat::kYaml;
  } else {
    return InvalidArgument(std::string(file_name) +
                           ": unknown table format (name must end in .json, .yaml or .yml)");
  }
  auto table = ParsePartitionTable(text, format);
  if (!table) return table.error().WithContext(std::string(file_name));
  return table;
}

}  // namespace tessera::topology

// The inventory's JSON schema (docs/inventory-schema.md) and the table view.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "inventory/inventory.h"
#include "inventory/parsers.h"

namespace tessera::inventory {
namespace {

using nlohmann::json;
// Output keeps the documented field order; input accepts any order.
using ordered = nlohmann::ordered_json;

constexpr int kSchemaVersion = 1;

std::string Hex(uint64_t value, int width) {
  char buffer[24];
  std::snprintf(buffer, sizeof buffer, "%0*llx", width, static_cast<unsigned long long>(value));
  return buffer;
}

ordered NodeJson(const DeviceNode& node) {
  return {{"path", node.path},
          {"major", node.major},
          {"minor", node.minor},
          {"type", std::string(1, node.type)},
          {"exists", node.exists}};
}

ordered OptionalNode(const std::optional<DeviceNode>& node) {
  return node ? NodeJson(*node) : ordered(nullptr);
}

ordered MigJson(const std::optional<MigState>& mig) {
  if (!mig) return nullptr;
  auto mode = [](const std::optional<bool>& on) {
    return on ? ordered(*on ? "enabled" : "disabled") : ordered(nullptr);
  };
  ordered devices = ordered::array();
  for (const MigDevice& m : mig->devices) {
    ordered placement = nullptr;
    if (m.placement) placement = {{"start", m.placement->start}, {"size", m.placement->size}};
    devices.push_back({{"index", m.index},
                       {"gpu_instance_id", m.gpu_instance_id},
                       {"compute_instance_id", m.compute_instance_id},
                       {"profile", m.profile.empty() ? ordered(nullptr) : ordered(m.profile)},
                       {"profile_id", m.profile_id ? ordered(*m.profile_id) : ordered(nullptr)},
                       {"placement", placement},
                       {"uuid", m.uuid.empty() ? ordered(nullptr) : ordered(m.uuid)},
                       {"memory_bytes", m.memory_bytes},
                       {"multiprocessors", m.multiprocessors},
                       {"gpu_instance_node", OptionalNode(m.gpu_instance_node)},
                       {"compute_instance_node", OptionalNode(m.compute_instance_node)}});
  }
  return {{"mode", mode(mig->enabled)}, {"pending_mode", mode(mig->pending)}, {"devices", devices}};
}

ordered DeviceJson(const PciDevice& d) {
  ordered bars = ordered::array();
  for (const Bar& bar : d.bars) {
    bars.push_back({{"index", bar.index},
                    {"start", "0x" + Hex(bar.start, 1)},
                    {"size", bar.size},
                    {"flags", "0x" + Hex(bar.flags, 1)}});
  }
  ordered nodes = ordered::array();
  for (const DeviceNode& node : d.device_nodes)
    nodes.push_back(NodeJson(node));
  ordered link = nullptr;
  if (d.link) {
    link = {{"current_speed", d.link->current_speed},
            {"current_width", d.link->current_width},
            {"max_speed", d.link->max_speed},
            {"max_width", d.link->max_width}};
  }
  return {{"pci_address", d.pci_address},
          {"vendor_id", Hex(d.vendor_id, 4)},
          {"device_id", Hex(d.device_id, 4)},
          {"subsystem_vendor_id", Hex(d.subsystem_vendor_id, 4)},
          {"subsystem_device_id", Hex(d.subsystem_device_id, 4)},
          {"class_code", Hex(d.class_code, 6)},
          {"revision", Hex(d.revision, 2)},
          {"kind", DeviceKindName(d.kind)},
          {"vendor", d.vendor_name},
          {"model", d.model},
          {"driver", d.driver.empty() ? ordered(nullptr) : ordered(d.driver)},
          {"iommu_group", d.iommu_group ? ordered(*d.iommu_group) : ordered(nullptr)},
          {"numa_node", d.numa_node},
          {"bars", bars},
          {"link", link},
          {"upstream_bridges", d.upstream_bridges},
          {"device_nodes", nodes},
          {"gpu_uuid", d.gpu_uuid ? ordered(*d.gpu_uuid) : ordered(nullptr)},
          {"product_name", d.product_name ? ordered(*d.product_name) : ordered(nullptr)},
          {"memory_bytes", d.memory_bytes ? ordered(*d.memory_bytes) : ordered(nullptr)},
          {"module_id", d.module_id ? ordered(*d.module_id) : ordered(nullptr)},
          {"nvidia_minor", d.nvidia_minor ? ordered(*d.nvidia_minor) : ordered(nullptr)},
          {"mig", MigJson(d.mig)},
          {"warnings", d.warnings}};
}

// Thrown inside FromJson only; turned into an InvalidArgument error before it returns.
struct JsonFieldError {
  std::string message;
};

// Reads typed fields and reports the JSON path of the first bad one.
class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}

  const json& Field(const json& object, const char* name, json::value_t type,
                    bool nullable = false) {
    if (!object.is_object()) throw Bad(path_ + ": expected an object");
    auto it = object.find(name);
    if (it == object.end()) throw Bad(path_ + "." + name + ": missing");
    if (nullable && it->is_null()) return *it;
    bool ok = it->type() == type ||
              (type == json::value_t::number_integer && it->is_number_unsigned()) ||
              (type == json::value_t::number_unsigned && it->is_number_integer() && *it >= 0);
    if (!ok)
      throw Bad(path_ + "." + name + ": expected " + TypeName(type) + ", got " + it->type_name());
    return *it;
  }
  std::string String(const json& object, const char* name) {
    return Field(object, name, json::value_t::string).get<std::string>();
  }
  uint32_t HexField(const json& object, const char* name, int bits) {
    std::string text = String(object, name);
    auto value = ParseHexAttribute(text, bits);
    if (!value || text.find("0x") == 0)
      throw Bad(path_ + "." + name + ": expected lowercase hex without 0x");
    return *value;
  }
  std::vector<std::string> Strings(const json& object, const char* name) {
    const json& array = Field(object, name, json::value_t::array);
    std::vector<std::string> out;
    for (size_t i = 0; i < array.size(); ++i) {
      if (!array[i].is_string()) {
        throw Bad(path_ + "." + name + "[" + std::to_string(i) + "]: expected string");
      }
      out.push_back(array[i].get<std::string>());
    }
    return out;
  }
  Reader At(const std::string& suffix) const { return Reader(path_ + suffix); }

 private:
  static JsonFieldError Bad(std::string message) { return {std::move(message)}; }
  static std::string TypeName(json::value_t type) {
    switch (type) {
      case json::value_t::string:
        return "string";
      case json::value_t::array:
        return "array";
      case json::value_t::object:
        return "object";
      case json::value_t::boolean:
        return "boolean";
      default:
        return "number";
    }
  }
  std::string path_;
};

DeviceNode ParseNode(Reader r, const json& j) {
  DeviceNode node;
  node.path = r.String(j, "path");
  node.major = r.Field(j, "major", json::value_t::number_unsigned).get<uint32_t>();
  node.minor = r.Field(j, "minor", json::value_t::number_unsigned).get<uint32_t>();
  std::string type = r.String(j, "type");
  if (type != "c" && type != "b") throw JsonFieldError{"type: expected \"c\" or \"b\""};
  node.type = type[0];
  node.exists = r.Field(j, "exists", json::value_t::boolean).get<bool>();
  return node;
}

std::optional<bool> ParseMode(Reader r, const json& j, const char* name) {
  const json& mode = r.Field(j, name, json::value_t::string, true);
  if (mode.is_null()) return std::nullopt;
  if (mode == "enabled") return true;
  if (mode == "disabled") return false;
  throw JsonFieldError{std::string(name) + ": expected \"enabled\", \"disabled\" or null"};
}

// "mig" is optional on input: snapshots written before MIG support lack it.
std::optional<MigState> ParseMig(Reader r, const json& device) {
  auto it = device.find("mig");
  if (it == device.end() || it->is_null()) return std::nullopt;
  Reader mr = r.At(".mig");
  const json& j = *it;
  MigState state;
  state.enabled = ParseMode(mr, j, "mode");
  state.pending = ParseMode(mr, j, "pending_mode");
  const json& devices = mr.Field(j, "devices", json::value_t::array);
  for (size_t i = 0; i < devices.size(); ++i) {
    Reader d = mr.At(".devices[" + std::to_string(i) + "]");
    const json& m = devices[i];
    auto u32 = [&](const json& object, const char* name) {
      return d.Field(object, name, json::value_t::number_unsigned).get<uint32_t>();
    };
    MigDevice device;
    device.index = u32(m, "index");
    device.gpu_instance_id = u32(m, "gpu_instance_id");
    device.compute_instance_id = u32(m, "compute_instance_id");
    const json& profile = d.Field(m, "profile", json::value_t::string, true);
    if (!profile.is_null()) device.profile = profile.get<std::string>();
    const json& profile_id = d.Field(m, "profile_id", json::value_t::number_unsigned, true);
    if (!profile_id.is_null()) device.profile_id = profile_id.get<uint32_t>();
    const json& placement = d.Field(m, "placement", json::value_t::object, true);
    if (!placement.is_null()) {
      Reader pr = d.At(".placement");
      device.placement =
          MigPlacement{pr.Field(placement, "start", json::value_t::number_unsigned).get<uint32_t>(),
                       pr.Field(placement, "size", json::value_t::number_unsigned).get<uint32_t>()};
    }
    const json& uuid = d.Field(m, "uuid", json::value_t::string, true);
    if (!uuid.is_null()) device.uuid = uuid.get<std::string>();
    device.memory_bytes =
        d.Field(m, "memory_bytes", json::value_t::number_unsigned).get<uint64_t>();
    device.multiprocessors = u32(m, "multiprocessors");
    for (auto [name, slot] : {std::pair{"gpu_instance_node", &device.gpu_instance_node},
                              std::pair{"compute_instance_node", &device.compute_instance_node}}) {
      const json& node = d.Field(m, name, json::value_t::object, true);
      if (!node.is_null()) *slot = ParseNode(d.At(std::string(".") + name), node);
    }
    state.devices.push_back(std::move(device));
  }
  return state;
}

DeviceKind KindFromJson(const std::string& kind, size_t i) {
  if (kind == "gpu") return DeviceKind::kGpu;
  if (kind == "accelerator") return DeviceKind::kAccelerator;
  if (kind == "nvswitch") return DeviceKind::kNvSwitch;
  if (kind == "companion") return DeviceKind::kCompanion;
  throw JsonFieldError{"inventory.devices[" + std::to_string(i) + "].kind: unknown kind \"" + kind +
                       "\""};
}

std::vector<Bar> BarsFromJson(Reader d, const json& j) {
  std::vector<Bar> out;
  const json& bars = d.Field(j, "bars", json::value_t::array);
  for (size_t b = 0; b < bars.size(); ++b) {
    Reader br = d.At(".bars[" + std::to_string(b) + "]");
    Bar bar;
    bar.index = br.Field(bars[b], "index", json::value_t::number_unsigned).get<int>();
    auto hex64 = [&](const char* name) {
      std::string t = br.String(bars[b], name);
      if (t.rfind("0x", 0) != 0)
        throw JsonFieldError{"bar " + std::string(name) + ": expected 0x-prefixed hex"};
      return std::stoull(t.substr(2), nullptr, 16);
    };
    bar.start = hex64("start");
    bar.size = br.Field(bars[b], "size", json::value_t::number_unsigned).get<uint64_t>();
    bar.flags = hex64("flags");
    out.push_back(bar);
  }
  return out;
}

std::optional<PcieLink> LinkFromJson(Reader d, const json& j) {
  const json& link = d.Field(j, "link", json::value_t::object, true);
  if (link.is_null()) return std::nullopt;
  Reader lr = d.At(".link");
  PcieLink l;
  l.current_speed = lr.String(link, "current_speed");
  l.current_width = lr.Field(link, "current_width", json::value_t::number_unsigned).get<int>();
  l.max_speed = lr.String(link, "max_speed");
  l.max_width = lr.Field(link, "max_width", json::value_t::number_unsigned).get<int>();
  return l;
}

// UUID, product name, memory, module ID and minor: what the NVIDIA driver reports.
void GpuFactsFromJson(Reader d, const json& j, PciDevice& device) {
  const json& uuid = d.Field(j, "gpu_uuid", json::value_t::string, true);
  if (!uuid.is_null()) device.gpu_uuid = uuid.get<std::string>();
  // Absent in snapshots written before they were reported.
  if (j.is_object() && j.contains("product_name")) {
    const json& name = d.Field(j, "product_name", json::value_t::string, true);
    if (!name.is_null()) device.product_name = name.get<std::string>();
  }
  if (j.is_object() && j.contains("memory_bytes")) {
    const json& memory = d.Field(j, "memory_bytes", json::value_t::number_unsigned, true);
    if (!memory.is_null()) device.memory_bytes = memory.get<uint64_t>();
  }
  if (j.is_object() && j.contains("module_id")) {
    const json& module = d.Field(j, "module_id", json::value_t::number_unsigned, true);
    if (!module.is_null() && module.get<uint64_t>() > UINT32_MAX)
      throw JsonFieldError{"module_id: larger than 32 bits"};
    if (!module.is_null()) device.module_id = module.get<uint32_t>();
  }
  const json& minor = d.Field(j, "nvidia_minor", json::value_t::number_unsigned, true);
  if (!minor.is_null()) device.nvidia_minor = minor.get<int>();
}

// inventory.devices[i].
PciDevice DeviceFromJson(Reader d, const json& j, size_t i) {
  PciDevice device;
  device.pci_address = d.String(j, "pci_address");
  if (!IsPciAddress(device.pci_address))
    throw JsonFieldError{"inventory.devices[" + std::to_string(i) +
                         "].pci_address: not dddd:bb:dd.f"};
  device.vendor_id = static_cast<uint16_t>(d.HexField(j, "vendor_id", 16));
  device.device_id = static_cast<uint16_t>(d.HexField(j, "device_id", 16));
  device.subsystem_vendor_id = static_cast<uint16_t>(d.HexField(j, "subsystem_vendor_id", 16));
  device.subsystem_device_id = static_cast<uint16_t>(d.HexField(j, "subsystem_device_id", 16));
  device.class_code = d.HexField(j, "class_code", 24);
  device.revision = static_cast<uint8_t>(d.HexField(j, "revision", 8));
  device.kind = KindFromJson(d.String(j, "kind"), i);
  device.vendor_name = d.String(j, "vendor");
  device.model = d.String(j, "model");
  const json& driver = d.Field(j, "driver", json::value_t::string, true);
  if (!driver.is_null()) device.driver = driver.get<std::string>();
  const json& group = d.Field(j, "iommu_group", json::value_t::number_unsigned, true);
  if (!group.is_null()) device.iommu_group = group.get<int>();
  device.numa_node = d.Field(j, "numa_node", json::value_t::number_integer).get<int>();
  device.bars = BarsFromJson(d, j);
  if (auto link = LinkFromJson(d, j)) device.link = *link;
  device.upstream_bridges = d.Strings(j, "upstream_bridges");
  const json& nodes = d.Field(j, "device_nodes", json::value_t::array);
  for (size_t n = 0; n < nodes.size(); ++n) {
    device.device_nodes.push_back(
        ParseNode(d.At(".device_nodes[" + std::to_string(n) + "]"), nodes[n]));
  }
  GpuFactsFromJson(d, j, device);
  device.mig = ParseMig(d, j);
  device.warnings = d.Strings(j, "warnings");
  return device;
}

std::map<int, IommuGroup> IommuGroupsFromJson(const json& groups) {
  std::map<int, IommuGroup> out;
  for (const auto& [key, members] : groups.items()) {
    auto number = ParseIntAttribute(key);
    if (!number || *number < 0)
      throw JsonFieldError{"inventory.iommu_groups: key \"" + key + "\" is not a group number"};
    IommuGroup group{*number, {}};
    if (!members.is_array())
      throw JsonFieldError{"inventory.iommu_groups." + key + ": expected array"};
    for (const auto& member : members) {
      if (!member.is_string())
        throw JsonFieldError{"inventory.iommu_groups." + key + ": expected strings"};
      group.members.push_back(member.get<std::string>());
    }
    out.emplace(*number, std::move(group));
  }
  return out;
}

NvidiaDriver DriverFromJson(Reader dr, const json& driver) {
  NvidiaDriver d;
  d.version = dr.String(driver, "version");
  const json& libraries = dr.Field(driver, "libraries", json::value_t::array);
  for (size_t l = 0; l < libraries.size(); ++l) {
    Reader lr = dr.At(".libraries[" + std::to_string(l) + "]");
    d.libraries.push_back({lr.String(libraries[l], "path"), lr.String(libraries[l], "soname"),
                           lr.String(libraries[l], "soname_link"),
                           lr.String(libraries[l], "arch")});
  }
  d.binaries = dr.Strings(driver, "binaries");
  d.firmware = dr.Strings(driver, "firmware");
  d.ipc_sockets = dr.Strings(driver, "ipc_sockets");
  return d;
}

}  // namespace

std::string ToJson(const Inventory& inventory, int indent) {
  ordered devices = ordered::array();
  for (const auto& device : inventory.devices)
    devices.push_back(DeviceJson(device));
  ordered groups = ordered::object();
  for (const auto& [number, group] : inventory.iommu_groups) {
    groups[std::to_string(number)] = group.members;
  }
  ordered shared = ordered::array();
  for (const auto& node : inventory.shared_device_nodes) {
    ordered entry = NodeJson(node.node);
    entry["role"] = node.role;
    shared.push_back(entry);
  }
  ordered driver = nullptr;
  if (inventory.nvidia_driver) {
    const NvidiaDriver& d = *inventory.nvidia_driver;
    ordered libraries = ordered::array();
    for (const auto& lib : d.libraries) {
      libraries.push_back({{"path", lib.path},
                           {"soname", lib.soname},
                           {"soname_link", lib.soname_link},
                           {"arch", lib.arch}});
    }
    driver = {{"version", d.version},
              {"libraries", libraries},
              {"binaries", d.binaries},
              {"firmware", d.firmware},
              {"ipc_sockets", d.ipc_sockets}};
  }
  ordered out = {{"schema_version", kSchemaVersion},
                 {"root", inventory.root},
                 {"devices", devices},
                 {"iommu_groups", groups},
                 {"shared_device_nodes", shared},
                 {"nvidia_driver", driver},
                 {"warnings", inventory.warnings}};
  return out.dump(indent);
}

Result<Inventory> FromJson(const std::string& text) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return InvalidArgument("inventory: not valid JSON");
  Inventory inventory;
  try {
    Reader r("inventory");
    int version = r.Field(doc, "schema_version", json::value_t::number_unsigned).get<int>();
    if (version != kSchemaVersion) {
      return InvalidArgument("inventory.schema_version: " + std::to_string(version) +
                             " is not supported (expected " + std::to_string(kSchemaVersion) + ")");
    }
    inventory.root = r.String(doc, "root");
    const json& devices = r.Field(doc, "devices", json::value_t::array);
    for (size_t i = 0; i < devices.size(); ++i) {
      inventory.devices.push_back(
          DeviceFromJson(r.At(".devices[" + std::to_string(i) + "]"), devices[i], i));
    }
    inventory.iommu_groups =
        IommuGroupsFromJson(r.Field(doc, "iommu_groups", json::value_t::object));
    const json& shared = r.Field(doc, "shared_device_nodes", json::value_t::array);
    for (size_t n = 0; n < shared.size(); ++n) {
      Reader sr = r.At(".shared_device_nodes[" + std::to_string(n) + "]");
      inventory.shared_device_nodes.push_back(
          {sr.String(shared[n], "role"), ParseNode(sr, shared[n])});
    }
    const json& driver = r.Field(doc, "nvidia_driver", json::value_t::object, true);
    if (!driver.is_null()) inventory.nvidia_driver = DriverFromJson(r.At(".nvidia_driver"), driver);
    inventory.warnings = r.Strings(doc, "warnings");
  } catch (const JsonFieldError& bad) {
    return InvalidArgument(bad.message);
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("inventory: ") + e.what());
  }
  return inventory;
}

std::string ToTable(const Inventory& inventory) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%-13s %-11s %-9s %-15s %-5s %-4s %-28s %s\n", "ADDRESS", "KIND",
                "ID", "DRIVER", "IOMMU", "NUMA", "NODES", "MODEL");
  out += line;
  for (const auto& d : inventory.devices) {
    std::string nodes;
    for (const auto& node : d.device_nodes) {
      if (!nodes.empty()) nodes += ",";
      nodes += node.path.substr(node.path.rfind('/') + 1);
    }
    if (nodes.empty()) nodes = "-";
    std::snprintf(line, sizeof line, "%-13s %-11s %-9s %-15s %-5s %-4d %-28s %s\n",
                  d.pci_address.c_str(), DeviceKindName(d.kind),
                  (Hex(d.vendor_id, 4) + ":" + Hex(d.device_id, 4)).c_str(),
                  d.driver.empty() ? "-" : d.driver.c_str(),
                  d.iommu_group ? std::to_string(*d.iommu_group).c_str() : "-", d.numa_node,
                  nodes.c_str(), d.model.c_str());
    out += line;
    if (d.mig) {
      auto mode = [](const std::optional<bool>& on) { return on ? (*on ? "on" : "off") : "?"; };
      out += std::string("  MIG ") + mode(d.mig->enabled) + " (pending " + mode(d.mig->pending) +
             ")\n";
      for (const MigDevice& m : d.mig->devices) {
        std::snprintf(line, sizeof line, "  MIG %u  GI %-2u CI %-2u %-12s %-40s %s%s%s\n", m.index,
                      m.gpu_instance_id, m.compute_instance_id,
                      m.profile.empty() ? "?" : m.profile.c_str(),
                      m.uuid.empty() ? "?" : m.uuid.c_str(),
                      m.gpu_instance_node ? m.gpu_instance_node->path.c_str() : "-",
                      m.compute_instance_node ? " " : "",
                      m.compute_instance_node ? m.compute_instance_node->path.c_str() : "");
        out += line;
      }
    }
  }
  if (inventory.devices.empty()) out += "(no GPUs, accelerators or NVSwitches found)\n";
  if (inventory.nvidia_driver) {
    const auto& d = *inventory.nvidia_driver;
    std::snprintf(
        line, sizeof line,
        "\nNVIDIA driver %s: %zu libraries, %zu binaries, %zu firmware files, %zu IPC sockets\n",
        d.version.c_str(), d.libraries.size(), d.binaries.size(), d.firmware.size(),
        d.ipc_sockets.size());
    out += line;
  }
  if (!inventory.shared_device_nodes.empty()) {
    out += "\nShared device nodes:\n";
    for (const auto& s : inventory.shared_device_nodes) {
      std::snprintf(line, sizeof line, "  %-18s %-32s %u:%u%s\n", s.role.c_str(),
                    s.node.path.c_str(), s.node.major, s.node.minor,
                    s.node.exists ? "" : " (missing)");
      out += line;
    }
  }
  size_t device_warnings = 0;
  for (const auto& d : inventory.devices)
    device_warnings += d.warnings.size();
  if (!inventory.warnings.empty() || device_warnings > 0) {
    out += "\nWarnings:\n";
    for (const auto& w : inventory.warnings)
      out += "  " + w + "\n";
    for (const auto& d : inventory.devices) {
      for (const auto& w : d.warnings)
        out += "  " + d.pci_address + ": " + w + "\n";
    }
  }
  return out;
}

}  // namespace tessera::inventory

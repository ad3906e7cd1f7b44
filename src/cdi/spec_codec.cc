// CDI spec text in and out. The reference library decodes strictly (sigs.k8s.io/yaml
// UnmarshalStrict: YAML or JSON, duplicate keys and unknown fields rejected, wrong types
// rejected, null meaning "absent"); this decoder follows the same rules and names the field.
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "cdi/cdi.h"
#include "common/bounded_yaml.h"

namespace tessera::cdi {
namespace {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

constexpr int kMaxDepth = 64;
constexpr size_t kMaxNodes = 1 << 20;

// Offset of the first byte that is not well-formed UTF-8, or npos. The reference parser (go-yaml)
// rejects such input, and strings that cannot be encoded back unchanged have no place in a spec.
size_t FindInvalidUtf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    auto c = static_cast<unsigned char>(text[i]);
    size_t extra = 0;
    uint32_t min = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      extra = 1;
      min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
      extra = 2;
      min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
      extra = 3;
      min = 0x10000;
    } else {
      return i;
    }
    if (i + extra >= text.size()) return i;
    uint32_t code = c & (0x3f >> extra);
    for (size_t k = 1; k <= extra; ++k) {
      auto next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xc0) != 0x80) return i;
      code = (code << 6) | (next & 0x3f);
    }
    if (code < min || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return i;
    i += extra + 1;
  }
  return std::string_view::npos;
}

// ---- YAML to JSON, typed like YAML 1.1 (go-yaml v2, which the reference parser uses) ----

// Its input comes from LoadBoundedYaml, which bounds the nodes it visits (aliases expanded) and
// its recursion.
struct YamlConverter {
  std::vector<Problem>* problems;
  bool failed = false;

  void Fail(std::string message) {
    if (!failed) problems->push_back({"-", "-", std::move(message)});
    failed = true;
  }

  static Json Scalar(const YAML::Node& node) {
    const std::string& text = node.Scalar();
    if (node.Tag() != "?") return text;  // quoted or explicitly tagged: a string
    static const std::set<std::string> kNull = {"", "~", "null", "Null", "NULL"};
    static const std::set<std::string> kTrue = {"true", "True", "TRUE", "yes", "Yes", "YES",
                                                "on",   "On",   "ON",   "y",   "Y"};
    static const std::set<std::string> kFalse = {"false", "False", "FALSE", "no", "No", "NO",
                                                 "off",   "Off",   "OFF",   "n",  "N"};
    if (kNull.count(text)) return nullptr;
    if (kTrue.count(text)) return true;
    if (kFalse.count(text)) return false;
    static const std::regex kInt("[-+]?(0|[1-9][0-9]*)");
    static const std::regex kFloat("[-+]?([0-9]+\\.[0-9]*|\\.[0-9]+)([eE][-+]?[0-9]+)?");
    if (text.size() < 32 && std::regex_match(text, kInt)) {
      errno = 0;
      if (text[0] == '-') {
        long long value = std::strtoll(text.c_str(), nullptr, 10);
        if (errno == 0) return value;
      } else {
        unsigned long long value = std::strtoull(text.c_str(), nullptr, 10);
        if (errno == 0) return value;
      }
      return text;
    }
    if (text.size() < 64 && std::regex_match(text, kFloat))
      return std::strtod(text.c_str(), nullptr);
    return text;
  }

  Json Convert(const YAML::Node& node) {
    if (failed) return nullptr;
    switch (node.Type()) {
      case YAML::NodeType::Undefined:
      case YAML::NodeType::Null:
        return nullptr;
      case YAML::NodeType::Scalar:
        return Scalar(node);
      case YAML::NodeType::Sequence: {
        Json out = Json::array();
        for (const auto& item : node)
          out.push_back(Convert(item));
        return out;
      }
      case YAML::NodeType::Map: {
        Json out = Json::object();
        for (const auto& item : node) {
          if (!item.first.IsScalar()) {
            Fail("mapping key is not a string");
            return nullptr;
          }
          const std::string& key = item.first.Scalar();
          if (out.contains(key)) {
            Fail("duplicate key \"" + key + "\"");
            return nullptr;
          }
          out[key] = Convert(item.second);
        }
        return out;
      }
    }
    return nullptr;
  }
};

// ---- Strict decoder over a JSON value ----

std::string TypeName(const Json& value) {
  switch (value.type()) {
    case Json::value_t::object:
      return "object";
    case Json::value_t::array:
      return "array";
    case Json::value_t::string:
      return "string";
    case Json::value_t::boolean:
      return "boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "integer";
    case Json::value_t::number_float:
      return "number";
    default:
      return "null";
  }
}

struct Decoder {
  std::vector<Problem>* problems;
  bool from_yaml = false;
  std::string device = "-";

  void Add(const std::string& field, std::string message) {
    problems->push_back({device, field, std::move(message)});
  }

  // Object with only the allowed keys; returns false (and reports) when `value` is no object.
  bool Object(const Json& value, const std::string& field,
              std::initializer_list<const char*> keys) {
    if (!value.is_object()) {
      Add(field.empty() ? "-" : field, "want an object, got " + TypeName(value));
      return false;
    }
    for (const auto& item : value.items()) {
      bool known = false;
      for (const char* key : keys)
        known = known || item.key() == key;
      if (!known) Add(Join(field, item.key()), "unknown field");
    }
    return true;
  }

  static std::string Join(const std::string& field, const std::string& key) {
    return field.empty() ? key : field + "." + key;
  }

  void String(const Json& object, const char* key, const std::string& field, std::string* out) {
    auto it = object.find(key);
    if (it == object.end() || it->is_null()) return;
    if (it->is_string()) {
      *out = it->get<std::string>();
    } else if (from_yaml && (it->is_number() || it->is_boolean())) {
      *out = it->dump();  // YAML plain scalars decode into string fields as written
    } else {
      Add(Join(field, key), "want a string, got " + TypeName(*it));
    }
  }

  template <typename T>
  bool Integer(const Json& value, const std::string& field, T* out) {
    bool ok = false;
    if (value.is_number_unsigned()) {
      auto v = value.get<uint64_t>();
      ok = v <= static_cast<uint64_t>(std::numeric_limits<T>::max());
      if (ok) *out = static_cast<T>(v);
    } else if (value.is_number_integer()) {
      auto v = value.get<int64_t>();
      ok = v >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
           (v < 0 ||
            static_cast<uint64_t>(v) <= static_cast<uint64_t>(std::numeric_limits<T>::max()));
      if (ok) *out = static_cast<T>(v);
    } else if (value.is_number_float()) {
      // Go's encoding/json accepts 1.0 for an integer field only when it is written as an
      // integer; any float literal is a type error.
      ok = false;
    }
    if (!ok) {
      Add(field,
          "want an integer in range, got " + (value.is_number() ? value.dump() : TypeName(value)));
    }
    return ok;
  }

  template <typename T>
  void OptionalInteger(const Json& object, const char* key, const std::string& field,
                       std::optional<T>* out) {
    auto it = object.find(key);
    if (it == object.end() || it->is_null()) return;
    T value{};
    if (Integer(*it, Join(field, key), &value)) *out = value;
  }

  void Int64(const Json& object, const char* key, const std::string& field, int64_t* out) {
    auto it = object.find(key);
    if (it == object.end() || it->is_null()) return;
    Integer(*it, Join(field, key), out);
  }

  void Bool(const Json& object, const char* key, const std::string& field, bool* out) {
    auto it = object.find(key);
    if (it == object.end() || it->is_null()) return;
    if (it->is_boolean()) {
      *out = it->get<bool>();
    } else {
      Add(Join(field, key), "want a boolean, got " + TypeName(*it));
    }
  }

  // Returns the array at key, or nullptr when absent/null/wrong type (reported).
  const Json* Array(const Json& object, const char* key, const std::string& field) {
    auto it = object.find(key);
    if (it == object.end() || it->is_null()) return nullptr;
    if (!it->is_array()) {
      Add(Join(field, key), "want an array, got " + TypeName(*it));
      return nullptr;
    }
    return &*it;
  }

  void Strings(const Json& object, const char* key, const std::string& field,
               std::vector<std::string>* out) {
    const Json* array = Array(object, key, field);
    if (!array) return;
    for (size_t i = 0; i < array->size(); ++i) {
      const Json& item = (*array)[i];
      std::string item_field = Join(field, key) + "[" + std::to_string(i) + "]";
      if (item.is_string()) {
        out->push_back(item.get<std::string>());
      } else if (item.is_null()) {
        out->push_back("");  // Go decodes null into a string slice element as ""
      } else if (from_yaml && (item.is_number() || item.is_boolean())) {
        out->push_back(item.dump());
      } else {
        Add(item_field, "want a string, got " + TypeName(item));
      }
    }
  }

  void StringMap(const Json& object, const char* key, const std::string& field,
                 std::map<std::string, std::string>* out) {
    auto it = object.find(key);
    if (it == object.end() || it->is_null()) return;
    if (!it->is_object()) {
      Add(Join(field, key), "want an object, got " + TypeName(*it));
      return;
    }
    for (const auto& item : it->items()) {
      std::string value;
      Json wrapper = Json::object({{"v", item.value()}});
      String(wrapper, "v", Join(field, key) + "." + item.key(), &value);
      (*out)[item.key()] = value;
    }
  }

  void DecodeDeviceNode(const Json& value, const std::string& field, DeviceNode* out) {
    if (!Object(value, field,
                {"path", "hostPath", "type", "major", "minor", "fileMode", "permissions", "uid",
                 "gid"})) {
      return;
    }
    String(value, "path", field, &out->path);
    String(value, "hostPath", field, &out->host_path);
    String(value, "type", field, &out->type);
    Int64(value, "major", field, &out->major);
    Int64(value, "minor", field, &out->minor);
    OptionalInteger(value, "fileMode", field, &out->file_mode);
    String(value, "permissions", field, &out->permissions);
    OptionalInteger(value, "uid", field, &out->uid);
    OptionalInteger(value, "gid", field, &out->gid);
  }

  void DecodeMount(const Json& value, const std::string& field, Mount* out) {
    if (!Object(value, field, {"hostPath", "containerPath", "options", "type"})) return;
    String(value, "hostPath", field, &out->host_path);
    String(value, "containerPath", field, &out->container_path);
    Strings(value, "options", field, &out->options);
    String(value, "type", field, &out->type);
  }

  void DecodeHook(const Json& value, const std::string& field, Hook* out) {
    if (!Object(value, field, {"hookName", "path", "args", "env", "timeout"})) return;
    String(value, "hookName", field, &out->hook_name);
    String(value, "path", field, &out->path);
    Strings(value, "args", field, &out->args);
    Strings(value, "env", field, &out->env);
    OptionalInteger(value, "timeout", field, &out->timeout);
  }

  void DecodeIntelRdt(const Json& value, const std::string& field, IntelRdt* out) {
    if (!Object(value, field,
                {"closID", "l3CacheSchema", "memBwSchema", "enableCMT", "enableMBM"})) {
      return;
    }
    String(value, "closID", field, &out->clos_id);
    String(value, "l3CacheSchema", field, &out->l3_cache_schema);
    String(value, "memBwSchema", field, &out->mem_bw_schema);
    Bool(value, "enableCMT", field, &out->enable_cmt);
    Bool(value, "enableMBM", field, &out->enable_mbm);
  }

  template <typename T, typename F>
  void Items(const Json& object, const char* key, const std::string& field, std::vector<T>* out,
             F decode) {
    const Json* array = Array(object, key, field);
    if (!array) return;
    for (size_t i = 0; i < array->size(); ++i) {
      const Json& item = (*array)[i];
      std::string item_field = Join(field, key) + "[" + std::to_string(i) + "]";
      T decoded;
      if (!item.is_null()) (this->*decode)(item, item_field, &decoded);
      out->push_back(std::move(decoded));
    }
  }

  void DecodeEdits(const Json& value, const std::string& field, ContainerEdits* out) {
    if (value.is_null()) return;
    if (!Object(value, field,
                {"env", "deviceNodes", "hooks", "mounts", "intelRdt", "additionalGids"})) {
      return;
    }
    Strings(value, "env", field, &out->env);
    Items(value, "deviceNodes", field, &out->device_nodes, &Decoder::DecodeDeviceNode);
    Items(value, "hooks", field, &out->hooks, &Decoder::DecodeHook);
    Items(value, "mounts", field, &out->mounts, &Decoder::DecodeMount);
    if (auto it = value.find("intelRdt"); it != value.end() && !it->is_null()) {
      out->intel_rdt.emplace();
      DecodeIntelRdt(*it, Join(field, "intelRdt"), &*out->intel_rdt);
    }
    if (const Json* gids = Array(value, "additionalGids", field)) {
      for (size_t i = 0; i < gids->size(); ++i) {
        uint32_t gid = 0;
        if (Integer((*gids)[i], Join(field, "additionalGids") + "[" + std::to_string(i) + "]",
                    &gid)) {
          out->additional_gids.push_back(gid);
        }
      }
    }
  }

  void DecodeDevice(const Json& value, size_t index, Device* out) {
    device = "devices[" + std::to_string(index) + "]";
    if (value.is_object()) {
      if (auto it = value.find("name");
          it != value.end() && it->is_string() && !it->get<std::string>().empty()) {
        device = it->get<std::string>();
      }
    }
    if (Object(value, "", {"name", "annotations", "containerEdits"})) {
      String(value, "name", "", &out->name);
      StringMap(value, "annotations", "", &out->annotations);
      if (auto it = value.find("containerEdits"); it != value.end()) {
        DecodeEdits(*it, "containerEdits", &out->container_edits);
      }
    }
    device = "-";
  }

  void DecodeSpec(const Json& value, Spec* out) {
    if (value.is_null()) {
      Add("-", "no spec data");
      return;
    }
    if (!Object(value, "", {"cdiVersion", "kind", "annotations", "devices", "containerEdits"})) {
      return;
    }
    String(value, "cdiVersion", "", &out->version);
    String(value, "kind", "", &out->kind);
    StringMap(value, "annotations", "", &out->annotations);
    if (!value.contains("devices")) Add("devices", "missing required field");
    if (const Json* devices = Array(value, "devices", "")) {
      for (size_t i = 0; i < devices->size(); ++i) {
        Device decoded;
        DecodeDevice((*devices)[i], i, &decoded);
        out->devices.push_back(std::move(decoded));
      }
    }
    if (auto it = value.find("containerEdits"); it != value.end()) {
      DecodeEdits(*it, "containerEdits", &out->container_edits);
    }
  }
};

// JSON parse that rejects duplicate keys (the reference parser reads JSON as YAML, whose strict
// mode rejects them).
bool ParseJson(std::string_view text, Json* out, std::string* error) {
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  int depth = 0;
  auto callback = [&](int, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
        keys.emplace_back();
        ++depth;
        break;
      case Json::parse_event_t::array_start:
        ++depth;
        break;
      case Json::parse_event_t::object_end:
        keys.pop_back();
        --depth;
        break;
      case Json::parse_event_t::array_end:
        --depth;
        break;
      case Json::parse_event_t::key:
        if (!keys.empty() && !keys.back().insert(parsed.get<std::string>()).second &&
            duplicate.empty()) {
          duplicate = parsed.get<std::string>();
        }
        break;
      default:
        break;
    }
    if (depth > kMaxDepth && duplicate.empty()) duplicate = "\x01";
    return depth <= kMaxDepth;
  };
  try {
    *out = Json::parse(text.begin(), text.end(), callback);
  } catch (const Json::exception& e) {
    *error = e.what();
    return false;
  }
  if (duplicate == "\x01") {
    *error = "document nested deeper than " + std::to_string(kMaxDepth) + " levels";
    return false;
  }
  if (!duplicate.empty()) {
    *error = "duplicate key \"" + duplicate + "\"";
    return false;
  }
  return true;
}

// ---- Encoding ----

OrderedJson EncodeEdits(const ContainerEdits& edits) {
  OrderedJson out = OrderedJson::object();
  if (!edits.env.empty()) out["env"] = edits.env;
  if (!edits.device_nodes.empty()) {
    OrderedJson nodes = OrderedJson::array();
    for (const DeviceNode& node : edits.device_nodes) {
      OrderedJson n = OrderedJson::object();
      n["path"] = node.path;
      if (!node.host_path.empty()) n["hostPath"] = node.host_path;
      if (!node.type.empty()) n["type"] = node.type;
      if (node.major != 0) n["major"] = node.major;
      if (node.minor != 0) n["minor"] = node.minor;
      if (node.file_mode) n["fileMode"] = *node.file_mode;
      if (!node.permissions.empty()) n["permissions"] = node.permissions;
      if (node.uid) n["uid"] = *node.uid;
      if (node.gid) n["gid"] = *node.gid;
      nodes.push_back(std::move(n));
    }
    out["deviceNodes"] = std::move(nodes);
  }
  if (!edits.hooks.empty()) {
    OrderedJson hooks = OrderedJson::array();
    for (const Hook& hook : edits.hooks) {
      OrderedJson h = OrderedJson::object();
      h["hookName"] = hook.hook_name;
      h["path"] = hook.path;
      if (!hook.args.empty()) h["args"] = hook.args;
      if (!hook.env.empty()) h["env"] = hook.env;
      if (hook.timeout) h["timeout"] = *hook.timeout;
      hooks.push_back(std::move(h));
    }
    out["hooks"] = std::move(hooks);
  }
  if (!edits.mounts.empty()) {
    OrderedJson mounts = OrderedJson::array();
    for (const Mount& mount : edits.mounts) {
      OrderedJson m = OrderedJson::object();
      m["hostPath"] = mount.host_path;
      m["containerPath"] = mount.container_path;
      if (!mount.options.empty()) m["options"] = mount.options;
      if (!mount.type.empty()) m["type"] = mount.type;
      mounts.push_back(std::move(m));
    }
    out["mounts"] = std::move(mounts);
  }
  if (edits.intel_rdt) {
    OrderedJson r = OrderedJson::object();
    if (!edits.intel_rdt->clos_id.empty()) r["closID"] = edits.intel_rdt->clos_id;
    if (!edits.intel_rdt->l3_cache_schema.empty()) {
      r["l3CacheSchema"] = edits.intel_rdt->l3_cache_schema;
    }
    if (!edits.intel_rdt->mem_bw_schema.empty()) r["memBwSchema"] = edits.intel_rdt->mem_bw_schema;
    if (edits.intel_rdt->enable_cmt) r["enableCMT"] = true;
    if (edits.intel_rdt->enable_mbm) r["enableMBM"] = true;
    out["intelRdt"] = std::move(r);
  }
  if (!edits.additional_gids.empty()) out["additionalGids"] = edits.additional_gids;
  return out;
}

OrderedJson Encode(const Spec& spec) {
  OrderedJson out = OrderedJson::object();
  out["cdiVersion"] = spec.version;
  out["kind"] = spec.kind;
  if (!spec.annotations.empty()) out["annotations"] = spec.annotations;
  OrderedJson devices = OrderedJson::array();
  for (const Device& device : spec.devices) {
    OrderedJson d = OrderedJson::object();
    d["name"] = device.name;
    if (!device.annotations.empty()) d["annotations"] = device.annotations;
    d["containerEdits"] = EncodeEdits(device.container_edits);
    devices.push_back(std::move(d));
  }
  out["devices"] = std::move(devices);
  OrderedJson edits = EncodeEdits(spec.container_edits);
  if (!edits.empty()) out["containerEdits"] = std::move(edits);
  return out;
}

void EmitYaml(const OrderedJson& value, int indent, bool in_sequence, std::string* out) {
  std::string pad(static_cast<size_t>(indent), ' ');
  auto scalar = [](const OrderedJson& v) {
    // JSON string syntax is valid YAML double-quoted syntax; non-ASCII stays UTF-8.
    return v.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
  };
  if (value.is_object()) {
    bool first = true;
    for (const auto& item : value.items()) {
      std::string key = item.key();
      std::string prefix = (first && in_sequence) ? "" : pad;
      first = false;
      const OrderedJson& child = item.value();
      if (child.is_object() && !child.empty()) {
        *out += prefix + key + ":\n";
        EmitYaml(child, indent + 2, false, out);
      } else if (child.is_array() && !child.empty()) {
        *out += prefix + key + ":\n";
        EmitYaml(child, indent, false, out);
      } else if (child.is_object()) {
        *out += prefix + key + ": {}\n";
      } else if (child.is_array()) {
        *out += prefix + key + ": []\n";
      } else {
        *out += prefix + key + ": " + scalar(child) + "\n";
      }
    }
  } else if (value.is_array()) {
    for (const auto& item : value) {
      if (item.is_object() && !item.empty()) {
        *out += pad + "- ";
        EmitYaml(item, indent + 2, true, out);
      } else if (item.is_array() && !item.empty()) {
        *out += pad + "-\n";
        EmitYaml(item, indent + 2, false, out);
      } else if (item.is_object()) {
        *out += pad + "- {}\n";
      } else if (item.is_array()) {
        *out += pad + "- []\n";
      } else {
        *out += pad + "- " + scalar(item) + "\n";
      }
    }
  }
}

}  // namespace

ParsedSpec ParseSpec(std::string_view text) {
  ParsedSpec parsed;
  if (text.size() > kMaxSpecFileBytes) {
    parsed.problems.push_back({"-", "-", "spec larger than 16 MiB"});
    return parsed;
  }
  if (size_t bad = FindInvalidUtf8(text); bad != std::string_view::npos) {
    parsed.problems.push_back({"-", "-", "invalid UTF-8 at byte " + std::to_string(bad)});
    return parsed;
  }
  auto start = text.find_first_not_of(" \t\r\n");
  bool is_json = start != std::string_view::npos && text[start] == '{';
  Json document;
  if (is_json) {
    std::string error;
    if (!ParseJson(text, &document, &error)) {
      parsed.problems.push_back({"-", "-", "invalid JSON: " + error});
      return parsed;
    }
  } else {
    auto node = LoadBoundedYaml(text, YamlBounds{kMaxNodes, kMaxDepth});
    if (!node) {
      parsed.problems.push_back({"-", "-", "invalid " + node.error().message});
      return parsed;
    }
    try {
      YamlConverter converter{&parsed.problems};
      document = converter.Convert(*node);
      if (converter.failed) return parsed;
    } catch (const YAML::Exception& e) {
      parsed.problems.push_back({"-", "-", std::string("invalid YAML: ") + e.what()});
      return parsed;
    }
  }
  Decoder decoder{&parsed.problems, !is_json};
  decoder.DecodeSpec(document, &parsed.spec);
  return parsed;
}

std::string ToJson(const Spec& spec, int indent) {
  return Encode(spec).dump(indent, ' ', false, OrderedJson::error_handler_t::replace) + "\n";
}

std::string ToYaml(const Spec& spec) {
  std::string out;
  EmitYaml(Encode(spec), 0, false, &out);
  return out;
}

}  // namespace tessera::cdi

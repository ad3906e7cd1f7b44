// Snapshot JSON in and out. Shared by the Linux-side consumers and the mingw-w64 native backend.
// Parsing is strict and every error names the field. Internally a local exception carries the
// first error to ParseSnapshot, which turns it into a value; nothing escapes this module.
// Format 2's Hyper-V facts are read and written by snapshot_hyperv_json.cc.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <set>

#include "common/untrusted_text.h"
#include "windows/snapshot.h"
#include "windows/snapshot_json_fields.h"

namespace tessera::windows {
namespace snapshot_json {

[[noreturn]] void Throw(const std::string& path, const std::string& problem) {
  throw FieldError{(path.empty() ? std::string("snapshot") : path) + ": " + problem};
}

std::string Join(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

std::string Index(const std::string& path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

std::string Quote(const std::string& value) {
  return "\"" + Excerpt(value, 200) + "\"";
}

namespace {

const char* TypeName(const json& j) {
  return j.type_name();
}

bool IsHexDigit(char c) {
  return std::isxdigit(static_cast<unsigned char>(c)) != 0;
}

}  // namespace

void ExpectObject(const json& j, const std::string& path,
                  std::initializer_list<const char*> fields) {
  if (!j.is_object()) Throw(path, std::string("expected an object, got ") + TypeName(j));
  for (const auto& item : j.items()) {
    bool known = std::find_if(fields.begin(), fields.end(),
                              [&](const char* f) { return item.key() == f; }) != fields.end();
    if (!known) Throw(Join(path, Excerpt(item.key())), "unknown field");
  }
  for (const char* f : fields) {
    if (!j.contains(f)) Throw(Join(path, f), "missing field");
  }
}

std::string GetString(const json& j, const std::string& path, const char* key) {
  const json& v = j.at(key);
  if (!v.is_string()) {
    Throw(Join(path, key), std::string("expected a string, got ") + TypeName(v));
  }
  return v.get<std::string>();
}

bool GetBool(const json& j, const std::string& path, const char* key) {
  const json& v = j.at(key);
  if (!v.is_boolean()) {
    Throw(Join(path, key), std::string("expected true or false, got ") + TypeName(v));
  }
  return v.get<bool>();
}

uint64_t GetUnsigned(const json& j, const std::string& path, const char* key, uint64_t max) {
  const json& v = j.at(key);
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0)) {
    Throw(Join(path, key), std::string("expected a non-negative integer, got ") + TypeName(v));
  }
  uint64_t n = v.get<uint64_t>();
  if (n > max) Throw(Join(path, key), "value " + std::to_string(n) + " is out of range");
  return n;
}

const json& GetArray(const json& j, const std::string& path, const char* key, size_t max_items) {
  const json& v = j.at(key);
  std::string field = Join(path, key);
  if (!v.is_array()) Throw(field, std::string("expected an array, got ") + TypeName(v));
  if (v.size() > max_items) {
    Throw(field, "more than " + std::to_string(max_items) + " entries");
  }
  return v;
}

std::vector<std::string> GetStringArray(const json& j, const std::string& path, const char* key,
                                        size_t max_items) {
  const json& v = GetArray(j, path, key, max_items);
  std::string field = Join(path, key);
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string()) {
      Throw(Index(field, i), std::string("expected a string, got ") + TypeName(v[i]));
    }
    out.push_back(v[i].get<std::string>());
  }
  return out;
}

uint64_t GetHex(const json& j, const std::string& path, const char* key, size_t digits) {
  std::string s = GetString(j, path, key);
  if (s.size() != digits || !std::all_of(s.begin(), s.end(), IsHexDigit)) {
    Throw(Join(path, key),
          "expected " + std::to_string(digits) + " hex digits without 0x, got " + Quote(s));
  }
  return std::stoull(s, nullptr, 16);
}

}  // namespace snapshot_json

namespace {

using namespace snapshot_json;

bool IsCopyToVmName(const std::string& name) {
  for (const char* known : kCopyToVmSubkeys) {
    if (name == known) return true;
  }
  return false;
}

// "CopyToVmOverwrite" or "<component>\CopyToVmOverwrite": the names Windows looks at.
void CheckSubkey(const std::string& subkey, const std::string& field) {
  size_t slash = subkey.find('\\');
  std::string leaf = slash == std::string::npos ? subkey : subkey.substr(slash + 1);
  if (slash != std::string::npos && (slash == 0 || leaf.find('\\') != std::string::npos)) {
    Throw(field, Quote(subkey) + " is not CopyToVm* or <component>\\CopyToVm*");
  }
  if (!IsCopyToVmName(leaf)) {
    Throw(field, Quote(subkey) +
                     " does not name CopyToVmOverwrite, CopyToVmWhenNewer, "
                     "CopyToVmOverwriteWow64 or CopyToVmWhenNewerWow64");
  }
}

CopyToVmValue ParseCopyToVmValue(const json& j, const std::string& path) {
  ExpectObject(j, path, {"subkey", "name", "type", "strings"});
  CopyToVmValue value;
  value.subkey = GetString(j, path, "subkey");
  CheckSubkey(value.subkey, Join(path, "subkey"));
  value.name = GetString(j, path, "name");
  std::string type = GetString(j, path, "type");
  auto parsed = ParseRegistryType(type);
  if (!parsed) {
    Throw(Join(path, "type"), "unknown registry type " + Quote(type) +
                                  " (expected REG_SZ, REG_MULTI_SZ, REG_EXPAND_SZ, REG_DWORD, "
                                  "REG_QWORD, REG_BINARY or REG_NONE)");
  }
  value.type = *parsed;
  value.strings = GetStringArray(j, path, "strings");
  bool single = value.type == RegistryType::kSz || value.type == RegistryType::kExpandSz;
  if (single && value.strings.size() != 1) {
    Throw(Join(path, "strings"), std::string(RegistryTypeName(value.type)) +
                                     " holds exactly one string, got " +
                                     std::to_string(value.strings.size()));
  }
  if (!single && value.type != RegistryType::kMultiSz && !value.strings.empty()) {
    Throw(Join(path, "strings"),
          std::string(RegistryTypeName(value.type)) + " is not a string type: expected []");
  }
  return value;
}

Adapter ParseAdapter(const json& j, const std::string& path) {
  ExpectObject(
      j, path,
      {"luid", "instance_id", "description", "vendor_id", "device_id", "subsystem_id", "revision",
       "class_code", "driver_service", "driver_version", "driver_key", "driver_store_path",
       "location_paths", "integrated", "detachable", "display", "compute", "copy_to_vm"});
  Adapter a;
  std::string luid = GetString(j, path, "luid");
  auto parsed_luid = ParseLuid(luid);
  if (!parsed_luid.ok()) Throw(Join(path, "luid"), parsed_luid.error().message);
  a.luid = *parsed_luid;
  a.instance_id = GetString(j, path, "instance_id");
  if (a.instance_id.empty()) Throw(Join(path, "instance_id"), "must not be empty");
  a.description = GetString(j, path, "description");
  a.vendor_id = static_cast<uint16_t>(GetHex(j, path, "vendor_id", 4));
  a.device_id = static_cast<uint16_t>(GetHex(j, path, "device_id", 4));
  a.subsystem_id = static_cast<uint32_t>(GetHex(j, path, "subsystem_id", 8));
  a.revision = static_cast<uint8_t>(GetHex(j, path, "revision", 2));
  if (!j.at("class_code").is_null()) {
    a.class_code = static_cast<uint32_t>(GetHex(j, path, "class_code", 6));
  }
  a.driver_service = GetString(j, path, "driver_service");
  a.driver_version = GetString(j, path, "driver_version");
  a.driver_key = GetString(j, path, "driver_key");
  a.driver_store_path = GetString(j, path, "driver_store_path");
  a.location_paths = GetStringArray(j, path, "location_paths");
  for (size_t i = 0; i < a.location_paths.size(); ++i) {
    if (a.location_paths[i].empty()) {
      Throw(Index(Join(path, "location_paths"), i), "must not be empty");
    }
  }
  a.integrated = GetBool(j, path, "integrated");
  a.detachable = GetBool(j, path, "detachable");
  a.display = GetBool(j, path, "display");
  a.compute = GetBool(j, path, "compute");
  const json& values = GetArray(j, path, "copy_to_vm", 4096);
  std::string values_path = Join(path, "copy_to_vm");
  for (size_t i = 0; i < values.size(); ++i) {
    a.copy_to_vm.push_back(ParseCopyToVmValue(values[i], Index(values_path, i)));
  }
  return a;
}

Snapshot ParseSnapshotJson(const json& j) {
  if (!j.is_object()) Throw("", std::string("expected an object, got ") + TypeName(j));
  if (!j.contains("snapshot_version")) Throw("snapshot_version", "missing field");
  uint64_t version = GetUnsigned(j, "", "snapshot_version", 1000);
  if (version == 1) {
    ExpectObject(j, "", {"snapshot_version", "hostname", "os", "hcs", "adapters"});
  } else if (version == 2) {
    ExpectObject(j, "",
                 {"snapshot_version", "hostname", "os", "hcs", "adapters", "pci_adapters", "hyperv",
                  "containerd"});
  } else {
    Throw("snapshot_version", "unsupported version " + std::to_string(version) +
                                  " (this tessera reads 1 and " + std::to_string(kSnapshotVersion) +
                                  ")");
  }
  Snapshot s;
  s.hostname = GetString(j, "", "hostname");

  const json& os = j.at("os");
  ExpectObject(os, "os", {"product_name", "build", "ubr"});
  s.os.product_name = GetString(os, "os", "product_name");
  s.os.build = static_cast<uint32_t>(GetUnsigned(os, "os", "build", 0xffffffffu));
  s.os.ubr = static_cast<uint32_t>(GetUnsigned(os, "os", "ubr", 0xffffffffu));

  const json& hcs = j.at("hcs");
  ExpectObject(hcs, "hcs", {"schema_versions", "source"});
  std::vector<std::string> versions = GetStringArray(hcs, "hcs", "schema_versions");
  for (size_t i = 0; i < versions.size(); ++i) {
    auto v = ParseSchemaVersion(versions[i]);
    if (!v.ok()) Throw(Index("hcs.schema_versions", i), v.error().message);
    s.hcs_schema_versions.push_back(*v);
  }
  std::sort(s.hcs_schema_versions.begin(), s.hcs_schema_versions.end());
  s.hcs_schema_source = GetString(hcs, "hcs", "source");
  if (s.hcs_schema_source != "service" && s.hcs_schema_source != "build-table") {
    Throw("hcs.source",
          "expected \"service\" or \"build-table\", got " + Quote(s.hcs_schema_source));
  }

  const json& adapters = GetArray(j, "", "adapters", 256);
  std::set<uint64_t> luids;
  for (size_t i = 0; i < adapters.size(); ++i) {
    std::string path = Index("adapters", i);
    s.adapters.push_back(ParseAdapter(adapters[i], path));
    if (!luids.insert(s.adapters.back().luid).second) {
      Throw(path + ".luid", "duplicate LUID " + FormatLuid(s.adapters.back().luid));
    }
  }
  if (version == 2) s.hyperv_facts = ParseHyperVFacts(j);
  return s;
}

}  // namespace

const char* RegistryTypeName(RegistryType type) {
  switch (type) {
    case RegistryType::kSz:
      return "REG_SZ";
    case RegistryType::kMultiSz:
      return "REG_MULTI_SZ";
    case RegistryType::kExpandSz:
      return "REG_EXPAND_SZ";
    case RegistryType::kDword:
      return "REG_DWORD";
    case RegistryType::kQword:
      return "REG_QWORD";
    case RegistryType::kBinary:
      return "REG_BINARY";
    case RegistryType::kNone:
      return "REG_NONE";
  }
  return "REG_NONE";
}

std::optional<RegistryType> ParseRegistryType(const std::string& name) {
  for (RegistryType t :
       {RegistryType::kSz, RegistryType::kMultiSz, RegistryType::kExpandSz, RegistryType::kDword,
        RegistryType::kQword, RegistryType::kBinary, RegistryType::kNone}) {
    if (name == RegistryTypeName(t)) return t;
  }
  return std::nullopt;
}

std::string FormatSchemaVersion(SchemaVersion version) {
  return std::to_string(version.major) + "." + std::to_string(version.minor);
}

Result<SchemaVersion> ParseSchemaVersion(const std::string& text) {
  size_t dot = text.find('.');
  auto digits = [](const std::string& s) {
    return !s.empty() && s.size() <= 4 &&
           std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (dot == std::string::npos || !digits(text.substr(0, dot)) || !digits(text.substr(dot + 1))) {
    return InvalidArgument("HCS schema version \"" + text + "\" is not MAJOR.MINOR");
  }
  return SchemaVersion{std::stoi(text.substr(0, dot)), std::stoi(text.substr(dot + 1))};
}

std::string FormatLuid(uint64_t luid) {
  return Hex(luid, 16);
}

Result<uint64_t> ParseLuid(const std::string& text) {
  std::string digits = text;
  if (digits.size() > 2 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X')) {
    digits = digits.substr(2);
  }
  if (digits.empty() || digits.size() > 16 ||
      !std::all_of(digits.begin(), digits.end(), IsHexDigit)) {
    return InvalidArgument("LUID \"" + text + "\" is not 1 to 16 hex digits");
  }
  return static_cast<uint64_t>(std::stoull(digits, nullptr, 16));
}

std::string FirstPciRootPath(const std::vector<std::string>& location_paths) {
  for (const std::string& p : location_paths) {
    if (p.rfind("PCIROOT(", 0) == 0) return p;
  }
  return "";
}

std::string Adapter::PciLocationPath() const {
  return FirstPciRootPath(location_paths);
}

SchemaVersion Snapshot::MaxSchemaVersion() const {
  return hcs_schema_versions.empty() ? SchemaVersion{} : hcs_schema_versions.back();
}

Result<Snapshot> ParseSnapshot(const std::string& text) {
  // Snapshots nest a handful of levels; the check runs on the bytes, before anything recurses.
  if (auto nesting = CheckJsonNesting(text, "snapshot"); !nesting) return nesting.error();
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    return InvalidArgument(std::string("snapshot is not valid JSON: ") + e.what());
  }
  try {
    return ParseSnapshotJson(j);
  } catch (const FieldError& e) {
    return InvalidArgument(e.message);
  } catch (const json::exception& e) {
    return InvalidArgument(std::string("snapshot: ") + e.what());
  }
}

std::string SnapshotToJson(const Snapshot& s, int indent) {
  using ojson = nlohmann::ordered_json;
  ojson adapters = ojson::array();
  for (const Adapter& a : s.adapters) {
    ojson values = ojson::array();
    for (const CopyToVmValue& v : a.copy_to_vm) {
      values.push_back(ojson{{"subkey", v.subkey},
                             {"name", v.name},
                             {"type", RegistryTypeName(v.type)},
                             {"strings", v.strings}});
    }
    ojson adapter = ojson::object();
    adapter["luid"] = FormatLuid(a.luid);
    adapter["instance_id"] = a.instance_id;
    adapter["description"] = a.description;
    adapter["vendor_id"] = Hex(a.vendor_id, 4);
    adapter["device_id"] = Hex(a.device_id, 4);
    adapter["subsystem_id"] = Hex(a.subsystem_id, 8);
    adapter["revision"] = Hex(a.revision, 2);
    adapter["class_code"] = a.class_code ? ojson(Hex(*a.class_code, 6)) : ojson(nullptr);
    adapter["driver_service"] = a.driver_service;
    adapter["driver_version"] = a.driver_version;
    adapter["driver_key"] = a.driver_key;
    adapter["driver_store_path"] = a.driver_store_path;
    adapter["location_paths"] = a.location_paths;
    adapter["integrated"] = a.integrated;
    adapter["detachable"] = a.detachable;
    adapter["display"] = a.display;
    adapter["compute"] = a.compute;
    adapter["copy_to_vm"] = values;
    adapters.push_back(adapter);
  }
  ojson versions = ojson::array();
  for (SchemaVersion v : s.hcs_schema_versions)
    versions.push_back(FormatSchemaVersion(v));
  ojson out = ojson::object();
  out["snapshot_version"] = s.hyperv_facts ? kSnapshotVersion : 1;
  out["hostname"] = s.hostname;
  out["os"] = ojson{{"product_name", s.os.product_name}, {"build", s.os.build}, {"ubr", s.os.ubr}};
  out["hcs"] = ojson{{"schema_versions", versions}, {"source", s.hcs_schema_source}};
  out["adapters"] = adapters;
  if (s.hyperv_facts) WriteHyperVFacts(*s.hyperv_facts, out);
  return out.dump(indent, ' ', false, ojson::error_handler_t::replace) + "\n";
}

}  // namespace tessera::windows

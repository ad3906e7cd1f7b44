// JSON for storage entitlements (admin API) and a submission's `volumes` (tenant API). Strict:
// unknown fields and duplicate keys are rejected, every error names the field.
#include <algorithm>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "common/strict_json.h"
#include "common/untrusted_text.h"
#include "tenancy/tenancy.h"

namespace tessera::tenancy {
namespace {

using nlohmann::json;

// What a wrongly typed value is, for an error message: its type and, for scalars, a short
// excerpt. Never the whole value: a caller-sent array or object is not serialised back.
std::string Show(const json& value) {
  switch (value.type()) {
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "an array";
    case json::value_t::string:
      return "the string \"" + Excerpt(value.get_ref<const std::string&>(), 40) + "\"";
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return value.get<bool>() ? "true" : "false";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float:
      return "the number " + Excerpt(value.dump(), 40);
    default:
      return "an unsupported value";
  }
}

Status RejectUnknown(const json& object, const std::string& where,
                     std::initializer_list<const char*> known) {
  for (auto it = object.begin(); it != object.end(); ++it) {
    const std::string& key = it.key();
    if (std::none_of(known.begin(), known.end(), [&](const char* k) { return key == k; })) {
      std::string list;
      for (const char* k : known)
        list += (list.empty() ? "" : ", ") + std::string(k);
      return InvalidArgument(where + "." + Excerpt(key) + ": unknown field (known: " + list + ")");
    }
  }
  return Ok();
}

Result<std::string> String(const json& object, const std::string& where, const char* key) {
  auto it = object.find(key);
  if (it == object.end()) return InvalidArgument(where + "." + key + ": missing");
  if (!it->is_string()) {
    return InvalidArgument(where + "." + key + ": expected a string, got " + Show(*it));
  }
  return it->get<std::string>();
}

Result<std::optional<bool>> OptionalBool(const json& object, const std::string& where,
                                         const char* key) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return std::optional<bool>();
  if (!it->is_boolean()) {
    return InvalidArgument(where + "." + key + ": expected true or false, got " + Show(*it));
  }
  return std::optional<bool>(it->get<bool>());
}

}  // namespace

Result<StorageEntitlements> StorageEntitlementsFromJson(const json& value) {
  if (!value.is_object()) return InvalidArgument("body: expected an object with \"nfs\"");
  if (auto s = RejectUnknown(value, "body", {"nfs"}); !s) return s.error();
  StorageEntitlements entitlements;
  auto nfs = value.find("nfs");
  if (nfs == value.end() || nfs->is_null()) return entitlements;
  if (!nfs->is_array()) return InvalidArgument("nfs: expected a list of exports");
  if (nfs->size() > kMaxExports) {
    return InvalidArgument("nfs: more than " + std::to_string(kMaxExports) + " exports");
  }
  std::set<std::string> names;
  for (size_t i = 0; i < nfs->size(); ++i) {
    const std::string where = "nfs[" + std::to_string(i) + "]";
    const json& item = (*nfs)[i];
    if (!item.is_object()) return InvalidArgument(where + ": expected an object");
    if (auto s = RejectUnknown(item, where, {"name", "server", "path", "readOnly", "port"}); !s) {
      return s.error();
    }
    NfsExport entry;
    auto name = String(item, where, "name");
    if (!name) return name.error();
    entry.name = std::move(*name);
    auto server = String(item, where, "server");
    if (!server) return server.error();
    entry.server = std::move(*server);
    auto path = String(item, where, "path");
    if (!path) return path.error();
    entry.path = std::move(*path);
    auto read_only = OptionalBool(item, where, "readOnly");
    if (!read_only) return read_only.error();
    entry.read_only = read_only->value_or(false);
    if (auto port = item.find("port"); port != item.end() && !port->is_null()) {
      if (!port->is_number_unsigned() || port->get<uint64_t>() < 1 ||
          port->get<uint64_t>() > 65535) {
        return InvalidArgument(where + ".port: expected an integer 1..65535, got " + Show(*port));
      }
      entry.port = static_cast<uint16_t>(port->get<uint64_t>());
    }
    if (auto s = ValidateNfsExport(entry, where); !s) return s.error();
    if (!names.insert(entry.name).second) {
      return InvalidArgument(where + ".name: \"" + entry.name + "\" is listed twice");
    }
    entitlements.nfs.push_back(std::move(entry));
  }
  return entitlements;
}

Result<StorageEntitlements> ParseStorageEntitlements(std::string_view json_text) {
  auto doc = ParseStrictJson(json_text, "body");
  if (!doc) return doc.error();
  return StorageEntitlementsFromJson(*doc);
}

std::string StorageEntitlementsToJson(const StorageEntitlements& entitlements) {
  json nfs = json::array();
  for (const auto& entry : entitlements.nfs) {
    json item = {{"name", entry.name},
                 {"server", entry.server},
                 {"path", entry.path},
                 {"readOnly", entry.read_only}};
    if (entry.port != 0) item["port"] = entry.port;
    nfs.push_back(std::move(item));
  }
  return json{{"nfs", std::move(nfs)}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

Result<std::vector<VolumeRequest>> VolumeRequestsFromJson(const json& value,
                                                          std::string_view field) {
  const std::string base(field);
  std::vector<VolumeRequest> requests;
  if (value.is_null()) return requests;
  if (!value.is_array()) return InvalidArgument(base + ": expected a list of volumes");
  if (value.size() > kMaxVolumes) {
    return InvalidArgument(base + ": more than " + std::to_string(kMaxVolumes) + " volumes");
  }
  for (size_t i = 0; i < value.size(); ++i) {
    const std::string where = base + "[" + std::to_string(i) + "]";
    const json& item = value[i];
    if (!item.is_object()) return InvalidArgument(where + ": expected an object");
    if (auto s = RejectUnknown(item, where, {"name", "mountPath", "readOnly"}); !s) {
      return s.error();
    }
    VolumeRequest request;
    auto name = String(item, where, "name");
    if (!name) return name.error();
    if (auto s = ValidateExportName(*name, where + ".name"); !s) return s.error();
    request.name = std::move(*name);
    auto mount_path = String(item, where, "mountPath");
    if (!mount_path) return mount_path.error();
    if (auto s = ValidateMountPath(*mount_path, where + ".mountPath"); !s) return s.error();
    request.mount_path = std::move(*mount_path);
    auto read_only = OptionalBool(item, where, "readOnly");
    if (!read_only) return read_only.error();
    request.read_only = *read_only;
    requests.push_back(std::move(request));
  }
  return requests;
}

Result<std::vector<VolumeRequest>> ParseVolumeRequests(std::string_view json_text) {
  auto doc = ParseStrictJson(json_text, "volumes");
  if (!doc) return doc.error();
  return VolumeRequestsFromJson(*doc);
}

nlohmann::json VolumeRequestsToJson(const std::vector<VolumeRequest>& requests) {
  nlohmann::json volumes = nlohmann::json::array();
  for (const auto& volume : requests) {
    nlohmann::json item = {{"name", volume.name}, {"mountPath", volume.mount_path}};
    if (volume.read_only) item["readOnly"] = *volume.read_only;
    volumes.push_back(std::move(item));
  }
  return volumes;
}

}  // namespace tessera::tenancy

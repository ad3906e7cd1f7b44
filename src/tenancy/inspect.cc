// Reading `podman network inspect` and `podman volume inspect` output. Lenient about fields we do
// not use (podman adds fields between releases), strict about the ones we rely on.
#include <nlohmann/json.hpp>
#include <string>

#include "tenancy/tenancy.h"

namespace tessera::tenancy {
namespace {

using nlohmann::json;

Result<json> OnlyElement(std::string_view text, const char* what) {
  json doc;
  try {
    doc = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    return Internal(std::string(what) + " inspect: invalid JSON: " + e.what());
  }
  if (!doc.is_array()) return Internal(std::string(what) + " inspect: expected a list");
  if (doc.empty()) return NotFound(std::string(what) + " inspect: no such " + what);
  if (!doc[0].is_object()) return Internal(std::string(what) + " inspect: expected an object");
  return doc[0];
}

std::string StringField(const json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::map<std::string, std::string> StringMap(const json& object, const char* key) {
  std::map<std::string, std::string> out;
  auto it = object.find(key);
  if (it == object.end() || !it->is_object()) return out;
  for (auto entry = it->begin(); entry != it->end(); ++entry) {
    if (entry->is_string()) out[entry.key()] = entry->get<std::string>();
  }
  return out;
}

}  // namespace

Result<NetworkInfo> ParseNetworkInspect(std::string_view json_text) {
  auto doc = OnlyElement(json_text, "network");
  if (!doc) return doc.error();
  NetworkInfo info;
  info.name = StringField(*doc, "name");
  info.driver = StringField(*doc, "driver");
  info.bridge = StringField(*doc, "network_interface");
  if (info.name.empty()) return Internal("network inspect: no name");
  auto internal = doc->find("internal");
  info.internal = internal != doc->end() && internal->is_boolean() && internal->get<bool>();
  if (auto subnets = doc->find("subnets"); subnets != doc->end() && subnets->is_array()) {
    for (const auto& subnet : *subnets) {
      if (subnet.is_object()) info.subnets.push_back(StringField(subnet, "subnet"));
    }
  }
  info.labels = StringMap(*doc, "labels");
  return info;
}

Result<VolumeInfo> ParseVolumeInspect(std::string_view json_text) {
  auto doc = OnlyElement(json_text, "volume");
  if (!doc) return doc.error();
  VolumeInfo info;
  info.name = StringField(*doc, "Name");
  info.driver = StringField(*doc, "Driver");
  if (info.name.empty()) return Internal("volume inspect: no Name");
  info.options = StringMap(*doc, "Options");
  info.labels = StringMap(*doc, "Labels");
  return info;
}

}  // namespace tessera::tenancy

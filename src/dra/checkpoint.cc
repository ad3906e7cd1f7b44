// The checkpoint of prepared claims in <plugin-dir>: written atomically after every change, read
// strictly on start, so a restarted plugin answers a retried prepare the same way and can
// unprepare a claim whose object is gone.
//
// {"version":1,"claims":{"<uid>":{"namespace":"..","name":"..","devices":[{"requestNames":[..],
//   "poolName":"..","deviceName":"..","cdiDeviceIds":[..]}]}}}
#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/untrusted_text.h"
#include "dra/dra.h"

namespace tessera::dra {
namespace {

using nlohmann::json;

constexpr size_t kMaxCheckpointBytes = 16 << 20;
constexpr size_t kMaxClaims = 4096;
constexpr size_t kMaxString = 512;

Status CheckKeys(const json& object, std::initializer_list<const char*> allowed,
                 const std::string& where) {
  for (const auto& [key, value] : object.items()) {
    bool known = false;
    for (const char* name : allowed)
      known = known || key == name;
    if (!known) return InvalidArgument(where + "." + Excerpt(key, 40) + ": unknown field");
  }
  return Ok();
}

Result<std::string> String(const json& object, const char* key, const std::string& where) {
  auto it = object.find(key);
  if (it == object.end()) return InvalidArgument(where + "." + key + ": required");
  if (!it->is_string()) return InvalidArgument(where + "." + key + ": want a string");
  const auto& s = it->get_ref<const std::string&>();
  if (s.empty() || s.size() > kMaxString) {
    return InvalidArgument(where + "." + key + ": want 1.." + std::to_string(kMaxString) +
                           " bytes");
  }
  return s;
}

Result<std::vector<std::string>> Strings(const json& object, const char* key,
                                         const std::string& where) {
  auto it = object.find(key);
  std::string at = where + "." + key;
  if (it == object.end()) return InvalidArgument(at + ": required");
  if (!it->is_array() || it->empty() || it->size() > kMaxResults) {
    return InvalidArgument(at + ": want 1.." + std::to_string(kMaxResults) + " strings");
  }
  std::vector<std::string> out;
  for (const auto& item : *it) {
    if (!item.is_string() || item.get_ref<const std::string&>().empty() ||
        item.get_ref<const std::string&>().size() > kMaxString) {
      return InvalidArgument(at + ": want non-empty strings");
    }
    out.push_back(item.get<std::string>());
  }
  return out;
}

}  // namespace

std::string SerializeCheckpoint(const Checkpoint& checkpoint) {
  json claims = json::object();
  for (const auto& [uid, claim] : checkpoint) {
    json devices = json::array();
    for (const auto& device : claim.devices) {
      devices.push_back({{"requestNames", device.request_names},
                         {"poolName", device.pool_name},
                         {"deviceName", device.device_name},
                         {"cdiDeviceIds", device.cdi_device_ids}});
    }
    claims[uid] = {{"namespace", claim.ref.namespace_name},
                   {"name", claim.ref.name},
                   {"devices", std::move(devices)}};
  }
  return json{{"version", 1}, {"claims", std::move(claims)}}.dump(1) + "\n";
}

Result<Checkpoint> ParseCheckpoint(std::string_view text) {
  if (text.size() > kMaxCheckpointBytes) return InvalidArgument("checkpoint: too large");
  if (auto nesting = CheckJsonNesting(text, "checkpoint"); !nesting) return nesting.error();
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return InvalidArgument("checkpoint: not valid JSON");
  if (!doc.is_object()) return InvalidArgument("checkpoint: want a JSON object");
  if (auto keys = CheckKeys(doc, {"version", "claims"}, "checkpoint"); !keys) return keys.error();
  auto version = doc.find("version");
  if (version == doc.end() || !version->is_number_integer() || version->get<int64_t>() != 1) {
    return InvalidArgument("checkpoint.version: want 1");
  }
  auto claims = doc.find("claims");
  if (claims == doc.end() || !claims->is_object()) {
    return InvalidArgument("checkpoint.claims: want an object keyed by claim UID");
  }
  if (claims->size() > kMaxClaims) return InvalidArgument("checkpoint.claims: too many");
  Checkpoint checkpoint;
  for (const auto& [uid, entry] : claims->items()) {
    std::string where = "claims." + Excerpt(uid, 40);
    if (uid.empty() || uid.size() > kMaxString) return InvalidArgument(where + ": bad UID");
    if (!entry.is_object()) return InvalidArgument(where + ": want an object");
    if (auto keys = CheckKeys(entry, {"namespace", "name", "devices"}, where); !keys) {
      return keys.error();
    }
    PreparedClaim claim;
    claim.ref.uid = uid;
    auto ns = String(entry, "namespace", where);
    if (!ns) return ns.error();
    auto name = String(entry, "name", where);
    if (!name) return name.error();
    claim.ref.namespace_name = *ns;
    claim.ref.name = *name;
    auto devices = entry.find("devices");
    if (devices == entry.end() || !devices->is_array() || devices->size() > kMaxResults) {
      return InvalidArgument(where + ".devices: want an array of at most " +
                             std::to_string(kMaxResults));
    }
    for (size_t i = 0; i < devices->size(); ++i) {
      const json& item = (*devices)[i];
      std::string at = where + ".devices[" + std::to_string(i) + "]";
      if (!item.is_object()) return InvalidArgument(at + ": want an object");
      if (auto keys =
              CheckKeys(item, {"requestNames", "poolName", "deviceName", "cdiDeviceIds"}, at);
          !keys) {
        return keys.error();
      }
      PreparedDevice device;
      auto requests = Strings(item, "requestNames", at);
      if (!requests) return requests.error();
      auto pool = String(item, "poolName", at);
      if (!pool) return pool.error();
      auto device_name = String(item, "deviceName", at);
      if (!device_name) return device_name.error();
      auto ids = Strings(item, "cdiDeviceIds", at);
      if (!ids) return ids.error();
      device.request_names = std::move(*requests);
      device.pool_name = std::move(*pool);
      device.device_name = std::move(*device_name);
      device.cdi_device_ids = std::move(*ids);
      claim.devices.push_back(std::move(device));
    }
    checkpoint[uid] = std::move(claim);
  }
  return checkpoint;
}

Result<Checkpoint> ReadCheckpoint(const std::string& path) {
  auto text = ReadWholeFile(path);
  if (!text) {
    if (text.error().category == ErrorCategory::kNotFound) return Checkpoint{};
    return text.error();
  }
  auto checkpoint = ParseCheckpoint(*text);
  if (!checkpoint) return checkpoint.error().WithContext(path);
  return checkpoint;
}

Status WriteCheckpoint(const std::string& path, const Checkpoint& checkpoint,
                       Durability durability) {
  return WriteFileAtomically(path, SerializeCheckpoint(checkpoint), 0600, durability);
}

}  // namespace tessera::dra

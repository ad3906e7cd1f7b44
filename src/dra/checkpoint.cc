// The checkpoint of prepared claims: one file per claim in <plugin-dir>/prepared, written
// atomically and parsed strictly on start, so a restarted plugin answers a retried prepare the
// same way without the claim object. Each file holds the format of the single checkpoint.json of
// earlier versions, with one claim:
//
// {"version":1,"claims":{"<uid>":{"namespace":"..","name":"..","devices":[{"requestNames":[..],
//   "poolName":"..","deviceName":"..","cdiDeviceIds":[..]}]}}}
// A device whose MIG instance prepare made (MIG by demand) adds "migInstance":{"pciAddress":..,
// "gpuInstanceId":n,"computeInstanceId":n,"uuid":..,"deviceNodes":[{"path":..,"hostPath":..,
// "major":n,"minor":n}]}: unprepare destroys that instance, also after a restart. Before the
// instance is made, the claim's file says "pending":true and the device "migIntent":{"pciAddress":
// ..,"profileId":n,"start":n,"size":n} (with "gpuInstanceId":n once a restarted plugin found it):
// a plugin killed before the file is completed finds its instance again. Files without these
// fields read as before.
#include <dirent.h>

#include <cerrno>
#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/bounded_file.h"
#include "common/untrusted_text.h"
#include "dra/dra.h"

namespace tessera::dra {
namespace {

using nlohmann::json;

constexpr size_t kMaxCheckpointBytes = 16 << 20;
constexpr size_t kMaxClaims = 4096;
constexpr size_t kMaxString = 512;
constexpr size_t kMaxUid = 253;
constexpr std::string_view kClaimFilePrefix = "claim_";
constexpr std::string_view kClaimFileSuffix = ".json";

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

constexpr size_t kMaxMigNodes = 4;

json MigInstanceJson(const MigInstance& instance) {
  json nodes = json::array();
  for (const auto& node : instance.device_nodes) {
    json entry = {{"path", node.path}, {"major", node.major}, {"minor", node.minor}};
    if (!node.host_path.empty()) entry["hostPath"] = node.host_path;
    nodes.push_back(std::move(entry));
  }
  json out = {{"pciAddress", instance.pci_address},
              {"gpuInstanceId", instance.gpu_instance_id},
              {"computeInstanceId", instance.compute_instance_id},
              {"deviceNodes", std::move(nodes)}};
  if (!instance.uuid.empty()) out["uuid"] = instance.uuid;
  return out;
}

Result<uint32_t> SmallNumber(const json& object, const char* key, const std::string& where) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_number_unsigned() || it->get<uint64_t>() > (1u << 20)) {
    return InvalidArgument(where + "." + key + ": want a number up to 2^20");
  }
  return it->get<uint32_t>();
}

json MigIntentJson(const MigIntent& intent) {
  json out = {{"pciAddress", intent.pci_address},
              {"profileId", intent.profile_id},
              {"start", intent.start},
              {"size", intent.size}};
  if (intent.gpu_instance_id) out["gpuInstanceId"] = *intent.gpu_instance_id;
  return out;
}

Result<MigIntent> ParseMigIntent(const json& item, const std::string& where) {
  std::string at = where + ".migIntent";
  if (!item.is_object()) return InvalidArgument(at + ": want an object");
  if (auto keys =
          CheckKeys(item, {"pciAddress", "profileId", "start", "size", "gpuInstanceId"}, at);
      !keys) {
    return keys.error();
  }
  MigIntent intent;
  auto pci = String(item, "pciAddress", at);
  if (!pci) return pci.error();
  intent.pci_address = *pci;
  uint32_t* fields[] = {&intent.profile_id, &intent.start, &intent.size};
  const char* names[] = {"profileId", "start", "size"};
  for (size_t i = 0; i < 3; ++i) {
    auto value = SmallNumber(item, names[i], at);
    if (!value) return value.error();
    *fields[i] = *value;
  }
  if (item.contains("gpuInstanceId")) {
    auto gi = SmallNumber(item, "gpuInstanceId", at);
    if (!gi) return gi.error();
    intent.gpu_instance_id = *gi;
  }
  return intent;
}

Result<cdi::DeviceNode> ParseMigNode(const json& item, const std::string& at) {
  if (!item.is_object()) return InvalidArgument(at + ": want an object");
  if (auto keys = CheckKeys(item, {"path", "hostPath", "major", "minor"}, at); !keys) {
    return keys.error();
  }
  cdi::DeviceNode node;
  auto path = String(item, "path", at);
  if (!path) return path.error();
  if (!path->starts_with("/dev/")) return InvalidArgument(at + ".path: want a /dev path");
  node.path = *path;
  if (item.contains("hostPath")) {
    auto host = String(item, "hostPath", at);
    if (!host) return host.error();
    node.host_path = *host;
  }
  auto major = SmallNumber(item, "major", at);
  if (!major) return major.error();
  auto minor = SmallNumber(item, "minor", at);
  if (!minor) return minor.error();
  node.type = "c";
  node.major = *major;
  node.minor = *minor;
  return node;
}

Result<MigInstance> ParseMigInstance(const json& item, const std::string& where) {
  std::string at = where + ".migInstance";
  if (!item.is_object()) return InvalidArgument(at + ": want an object");
  if (auto keys = CheckKeys(
          item, {"pciAddress", "gpuInstanceId", "computeInstanceId", "uuid", "deviceNodes"}, at);
      !keys) {
    return keys.error();
  }
  MigInstance instance;
  auto pci = String(item, "pciAddress", at);
  if (!pci) return pci.error();
  instance.pci_address = *pci;
  auto gi = SmallNumber(item, "gpuInstanceId", at);
  if (!gi) return gi.error();
  auto ci = SmallNumber(item, "computeInstanceId", at);
  if (!ci) return ci.error();
  instance.gpu_instance_id = *gi;
  instance.compute_instance_id = *ci;
  if (item.contains("uuid")) {
    auto uuid = String(item, "uuid", at);
    if (!uuid) return uuid.error();
    instance.uuid = *uuid;
  }
  auto nodes = item.find("deviceNodes");
  if (nodes == item.end() || !nodes->is_array() || nodes->size() > kMaxMigNodes) {
    return InvalidArgument(at + ".deviceNodes: want at most " + std::to_string(kMaxMigNodes));
  }
  for (size_t i = 0; i < nodes->size(); ++i) {
    auto node = ParseMigNode((*nodes)[i], at + ".deviceNodes[" + std::to_string(i) + "]");
    if (!node) return node.error();
    instance.device_nodes.push_back(std::move(*node));
  }
  return instance;
}

Result<PreparedDevice> ParseDevice(const json& item, const std::string& at) {
  if (!item.is_object()) return InvalidArgument(at + ": want an object");
  if (auto keys = CheckKeys(
          item,
          {"requestNames", "poolName", "deviceName", "cdiDeviceIds", "migInstance", "migIntent"},
          at);
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
  if (auto mig = item.find("migInstance"); mig != item.end()) {
    auto instance = ParseMigInstance(*mig, at);
    if (!instance) return instance.error();
    device.mig_instance = std::move(*instance);
  }
  if (auto intent = item.find("migIntent"); intent != item.end()) {
    auto parsed = ParseMigIntent(*intent, at);
    if (!parsed) return parsed.error();
    device.mig_intent = std::move(*parsed);
  }
  return device;
}

}  // namespace

std::string SerializeCheckpoint(const Checkpoint& checkpoint) {
  json claims = json::object();
  for (const auto& [uid, claim] : checkpoint) {
    json devices = json::array();
    for (const auto& device : claim.devices) {
      json entry = {{"requestNames", device.request_names},
                    {"poolName", device.pool_name},
                    {"deviceName", device.device_name},
                    {"cdiDeviceIds", device.cdi_device_ids}};
      if (device.mig_instance) entry["migInstance"] = MigInstanceJson(*device.mig_instance);
      if (device.mig_intent) entry["migIntent"] = MigIntentJson(*device.mig_intent);
      devices.push_back(std::move(entry));
    }
    claims[uid] = {{"namespace", claim.ref.namespace_name},
                   {"name", claim.ref.name},
                   {"devices", std::move(devices)}};
    if (claim.pending) claims[uid]["pending"] = true;
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
    if (auto keys = CheckKeys(entry, {"namespace", "name", "devices", "pending"}, where); !keys) {
      return keys.error();
    }
    PreparedClaim claim;
    claim.ref.uid = uid;
    if (auto pending = entry.find("pending"); pending != entry.end()) {
      if (!pending->is_boolean()) return InvalidArgument(where + ".pending: want a boolean");
      claim.pending = pending->get<bool>();
    }
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
      auto device = ParseDevice((*devices)[i], where + ".devices[" + std::to_string(i) + "]");
      if (!device) return device.error();
      claim.devices.push_back(std::move(*device));
    }
    checkpoint[uid] = std::move(claim);
  }
  return checkpoint;
}

Result<Checkpoint> ReadCheckpoint(const std::string& path) {
  auto text = ReadBoundedFile(path, kMaxCheckpointBytes);
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

bool IsFileNameSafeUid(std::string_view uid) {
  if (uid.empty() || uid.size() > kMaxUid || uid.front() == '.') return false;
  for (char c : uid) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

std::string PreparedClaimPath(std::string_view dir, std::string_view uid) {
  return std::string(dir) + "/" + std::string(kClaimFilePrefix) + std::string(uid) +
         std::string(kClaimFileSuffix);
}

Result<Checkpoint> ReadPreparedClaims(const std::string& dir, std::vector<std::string>* dropped) {
  Checkpoint checkpoint;
  DIR* handle = ::opendir(dir.c_str());
  if (!handle) {
    if (errno == ENOENT) return checkpoint;
    return ErrnoError("open " + dir, errno);
  }
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(handle)) {
    std::string_view name = entry->d_name;
    if (name.substr(0, kClaimFilePrefix.size()) == kClaimFilePrefix) names.emplace_back(name);
    if (names.size() > 2 * kMaxClaims) break;
  }
  ::closedir(handle);
  if (names.size() > 2 * kMaxClaims) return InvalidArgument(dir + ": too many claim files");
  for (const auto& name : names) {
    std::string path = dir + "/" + name;
    if (name.find(".tmp-") != std::string::npos) {  // a write cut short by a crash
      (void)RemoveFile(path, Durability::kProcessCrash);
      continue;
    }
    if (name.size() <= kClaimFilePrefix.size() + kClaimFileSuffix.size() ||
        name.substr(name.size() - kClaimFileSuffix.size()) != kClaimFileSuffix) {
      continue;
    }
    std::string uid = name.substr(kClaimFilePrefix.size(),
                                  name.size() - kClaimFilePrefix.size() - kClaimFileSuffix.size());
    if (!IsFileNameSafeUid(uid)) continue;
    if (checkpoint.size() >= kMaxClaims) return InvalidArgument(dir + ": too many claim files");
    // One claim's file is small. A planted FIFO, device or oversized file is dropped like a torn
    // one, not read, and not a reason to fail every start after.
    auto text = ReadBoundedFile(path, kMaxStateFileBytes);
    if (!text && text.error().category != ErrorCategory::kInvalidArgument) return text.error();
    Result<Checkpoint> one = text ? ParseCheckpoint(*text) : Result<Checkpoint>(text.error());
    std::string problem;
    if (!one) {
      problem = one.error().message;
    } else if (one->size() != 1 || one->begin()->first != uid) {
      problem = "want exactly claim " + uid;
    }
    if (!problem.empty()) {
      if (dropped) dropped->push_back(path + ": " + problem + "; dropped");
      (void)RemoveFile(path, Durability::kProcessCrash);
      continue;
    }
    checkpoint[uid] = std::move(one->begin()->second);
  }
  return checkpoint;
}

Status WritePreparedClaim(const std::string& dir, const PreparedClaim& claim,
                          Durability durability) {
  if (!IsFileNameSafeUid(claim.ref.uid)) {
    return InvalidArgument("claim UID " + Excerpt(claim.ref.uid, 40) + ": not a file name");
  }
  return WriteFileAtomically(PreparedClaimPath(dir, claim.ref.uid),
                             SerializeCheckpoint({{claim.ref.uid, claim}}), 0600, durability);
}

}  // namespace tessera::dra

// The GPU health file's format (gpu_health_file.h): JSON through nlohmann, written atomically.
#include "deviceplugin/gpu_health_file.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/bounded_file.h"
#include "common/pci_address.h"
#include "common/untrusted_text.h"

namespace tessera::deviceplugin {
namespace {

using Json = nlohmann::json;
constexpr size_t kMaxHealthGpus = 1024;
constexpr size_t kMaxHealthText = 512;

Json EntryJson(const health::FaultEntry& entry) {
  return Json{{"atMs", entry.at_ms},        {"signal", entry.signal}, {"xid", entry.xid},
              {"class", entry.fault_class}, {"action", entry.action}, {"reason", entry.reason}};
}

Json HealthJson(const health::GpuHealth& gpu) {
  Json history = Json::array();
  for (const auto& entry : gpu.history)
    history.push_back(EntryJson(entry));
  return Json{{"step", health::RecoveryStepName(gpu.step)},
              {"reason", gpu.reason},
              {"attempts", gpu.attempts},
              {"stepSinceMs", gpu.step_since_ms},
              {"faultedMs", gpu.faulted_ms},
              {"history", std::move(history)}};
}

// The field `key` of `object` as text (absent: empty), cut to kMaxHealthText bytes.
Result<std::string> TextField(const Json& object, const char* key, const std::string& where) {
  if (!object.contains(key)) return std::string();
  if (!object[key].is_string()) return InvalidArgument(where + "." + key + ": want a string");
  return Excerpt(object[key].get<std::string>(), kMaxHealthText);
}

Result<int64_t> NumberField(const Json& object, const char* key, const std::string& where) {
  if (!object.contains(key)) return int64_t{0};
  if (!object[key].is_number_integer())
    return InvalidArgument(where + "." + key + ": want an integer");
  return object[key].get<int64_t>();
}

Result<health::FaultEntry> ParseEntry(const Json& json, const std::string& where) {
  if (!json.is_object()) return InvalidArgument(where + ": want an object");
  health::FaultEntry entry;
  auto at = NumberField(json, "atMs", where);
  auto xid = NumberField(json, "xid", where);
  if (!at) return at.error();
  if (!xid) return xid.error();
  entry.at_ms = *at;
  entry.xid = static_cast<uint64_t>(*xid);
  for (auto [key, field] :
       {std::pair{"signal", &entry.signal}, std::pair{"class", &entry.fault_class},
        std::pair{"action", &entry.action}, std::pair{"reason", &entry.reason}}) {
    auto text = TextField(json, key, where);
    if (!text) return text.error();
    *field = *text;
  }
  return entry;
}

Result<health::GpuHealth> ParseGpuRecord(const Json& json, const std::string& where) {
  if (!json.is_object()) return InvalidArgument(where + ": want an object");
  health::GpuHealth gpu;
  auto step = TextField(json, "step", where);
  if (!step) return step.error();
  auto parsed = health::ParseRecoveryStep(*step);
  if (!parsed) return parsed.error().WithContext(where + ".step");
  gpu.step = *parsed;
  auto reason = TextField(json, "reason", where);
  auto attempts = NumberField(json, "attempts", where);
  auto since = NumberField(json, "stepSinceMs", where);
  auto faulted = NumberField(json, "faultedMs", where);
  if (!reason) return reason.error();
  if (!attempts) return attempts.error();
  if (!since) return since.error();
  if (!faulted) return faulted.error();
  gpu.reason = *reason;
  gpu.attempts = static_cast<int>(std::clamp<int64_t>(*attempts, 0, 1000));
  gpu.step_since_ms = *since;
  gpu.faulted_ms = *faulted;
  if (json.contains("history")) {
    const Json& history = json["history"];
    if (!history.is_array()) return InvalidArgument(where + ".history: want a list");
    size_t skip = history.size() > health::kMaxHistory ? history.size() - health::kMaxHistory : 0;
    for (size_t i = skip; i < history.size(); ++i) {
      auto entry = ParseEntry(history[i], where + ".history[" + std::to_string(i) + "]");
      if (!entry) return entry.error();
      gpu.history.push_back(std::move(*entry));
    }
  }
  return gpu;
}

}  // namespace

std::string SerializeGpuHealth(const GpuHealthMap& gpus) {
  Json out = {{"version", 1}, {"gpus", Json::object()}};
  for (const auto& [pci, gpu] : gpus)
    out["gpus"][pci] = HealthJson(gpu);
  return out.dump(1) + "\n";
}

Result<GpuHealthMap> ParseGpuHealth(std::string_view text) {
  if (auto nesting = CheckJsonNesting(text, "GPU health file"); !nesting) return nesting.error();
  Json doc = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return InvalidArgument("GPU health file: not valid JSON");
  if (!doc.is_object()) return InvalidArgument("GPU health file: want a JSON object");
  if (!doc.contains("version") || !doc["version"].is_number_integer() ||
      doc["version"].get<int64_t>() != 1) {
    return InvalidArgument("version: want 1");
  }
  GpuHealthMap gpus;
  if (!doc.contains("gpus")) return gpus;
  const Json& list = doc["gpus"];
  if (!list.is_object()) return InvalidArgument("gpus: want an object keyed by PCI address");
  if (list.size() > kMaxHealthGpus)
    return InvalidArgument("gpus: more than " + std::to_string(kMaxHealthGpus));
  for (const auto& [pci, entry] : list.items()) {
    std::string where = "gpus." + Excerpt(pci, 40);
    if (!IsPciAddress(pci))
      return InvalidArgument(where + ": not a canonical PCI address (0000:18:00.0)");
    auto gpu = ParseGpuRecord(entry, where);
    if (!gpu) return gpu.error();
    gpus[pci] = std::move(*gpu);
  }
  return gpus;
}

Result<GpuHealthMap> ReadGpuHealthFile(const std::string& path) {
  auto text = ReadBoundedFile(path, kMaxStateFileBytes);
  if (!text) {
    if (text.error().category == ErrorCategory::kNotFound) return GpuHealthMap{};
    return text.error();
  }
  auto parsed = ParseGpuHealth(*text);
  if (!parsed) return parsed.error().WithContext(path);
  return parsed;
}

Status WriteGpuHealthFile(const std::string& path, const GpuHealthMap& gpus) {
  std::error_code ignored;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ignored);
  return WriteFileAtomically(path, SerializeGpuHealth(gpus), 0644);
}

}  // namespace tessera::deviceplugin

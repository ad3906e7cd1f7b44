// The fault state file (fault_state.h): JSON through nlohmann, parsed strictly, written
// atomically.
#include "dra/fault_state.h"

#include <filesystem>
#include <initializer_list>
#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/bounded_file.h"
#include "common/pci_address.h"
#include "common/untrusted_text.h"

namespace tessera::dra {
namespace fault_state_detail {

using Json = nlohmann::json;

std::string Cut(const std::string& text) {
  return text.size() > kMaxFaultStateText ? text.substr(0, kMaxFaultStateText) : text;
}

Json EntryJson(const health::FaultEntry& entry) {
  return Json{{"atMs", entry.at_ms},
              {"signal", Cut(entry.signal)},
              {"xid", entry.xid},
              {"class", Cut(entry.fault_class)},
              {"action", Cut(entry.action)},
              {"reason", Cut(entry.reason)}};
}

Json RecordJson(const FaultRecord& record) {
  const health::GpuHealth& gpu = record.health;
  Json history = Json::array();
  size_t skip =
      gpu.history.size() > health::kMaxHistory ? gpu.history.size() - health::kMaxHistory : 0;
  for (size_t i = skip; i < gpu.history.size(); ++i)
    history.push_back(EntryJson(gpu.history[i]));
  Json out{{"step", health::RecoveryStepName(gpu.step)},
           {"reason", Cut(gpu.reason)},
           {"attempts", gpu.attempts},
           {"stepSinceMs", gpu.step_since_ms},
           {"faultedMs", gpu.faulted_ms},
           {"history", std::move(history)}};
  if (!gpu.in_service()) {
    Json taint{{"value", record.taint.value},
               {"effect", TaintEffectName(record.taint.effect)},
               {"timeAdded", record.taint.since_unix_seconds}};
    if (record.taint.gpu_instance_id) taint["gpuInstanceId"] = *record.taint.gpu_instance_id;
    out["taint"] = std::move(taint);
  }
  return out;
}

Status OnlyKeys(const Json& object, std::initializer_list<const char*> allowed,
                const std::string& where) {
  for (const auto& item : object.items()) {
    bool known = false;
    for (const char* name : allowed)
      known = known || item.key() == name;
    if (!known) return InvalidArgument(where + "." + Excerpt(item.key(), 40) + ": unknown field");
  }
  return Ok();
}

// A text field (absent: empty) of at most kMaxFaultStateText bytes.
Result<std::string> TextOf(const Json& object, const char* key, const std::string& where) {
  auto it = object.find(key);
  if (it == object.end()) return std::string();
  if (!it->is_string()) return InvalidArgument(where + "." + key + ": want a string");
  const auto& text = it->get_ref<const std::string&>();
  if (text.size() > kMaxFaultStateText) {
    return InvalidArgument(where + "." + key + ": longer than " +
                           std::to_string(kMaxFaultStateText) + " bytes");
  }
  return text;
}

// A non-negative integer field (absent: 0) of at most `max`.
Result<int64_t> CountOf(const Json& object, const char* key, const std::string& where,
                        int64_t max = INT64_MAX) {
  auto it = object.find(key);
  if (it == object.end()) return int64_t{0};
  bool fits = it->is_number_unsigned() && it->get<uint64_t>() <= static_cast<uint64_t>(max);
  if (!fits) {
    return InvalidArgument(where + "." + key + ": want an integer 0.." + std::to_string(max));
  }
  return static_cast<int64_t>(it->get<uint64_t>());
}

Result<health::FaultEntry> ParseEntry(const Json& json, const std::string& where) {
  if (!json.is_object()) return InvalidArgument(where + ": want an object");
  if (auto keys = OnlyKeys(json, {"atMs", "signal", "xid", "class", "action", "reason"}, where);
      !keys) {
    return keys.error();
  }
  health::FaultEntry entry;
  auto at = CountOf(json, "atMs", where);
  auto xid = CountOf(json, "xid", where);
  if (!at) return at.error();
  if (!xid) return xid.error();
  entry.at_ms = *at;
  entry.xid = static_cast<uint64_t>(*xid);
  for (const auto& [key, field] :
       {std::pair{"signal", &entry.signal}, std::pair{"class", &entry.fault_class},
        std::pair{"action", &entry.action}, std::pair{"reason", &entry.reason}}) {
    auto text = TextOf(json, key, where);
    if (!text) return text.error();
    *field = std::move(*text);
  }
  return entry;
}

bool IsLabelValue(const std::string& value) {
  if (value.empty() || value.size() > 63) return false;
  auto alnum = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  };
  for (char c : value)
    if (!alnum(c) && c != '.' && c != '_' && c != '-') return false;
  return alnum(value.front()) && alnum(value.back());
}

Result<DeviceFault> ParseTaint(const Json& json, const std::string& where) {
  if (!json.is_object()) return InvalidArgument(where + ": want an object");
  if (auto keys = OnlyKeys(json, {"value", "effect", "timeAdded", "gpuInstanceId"}, where); !keys)
    return keys.error();
  DeviceFault taint;
  auto value = TextOf(json, "value", where);
  if (!value) return value.error();
  if (!IsLabelValue(*value)) return InvalidArgument(where + ".value: want a label value");
  taint.value = *value;
  auto effect = TextOf(json, "effect", where);
  if (!effect) return effect.error();
  if (*effect == "NoExecute") {
    taint.effect = TaintEffect::kNoExecute;
  } else if (*effect != "NoSchedule") {
    return InvalidArgument(where + ".effect: want NoSchedule or NoExecute");
  }
  auto added = CountOf(json, "timeAdded", where);
  if (!added) return added.error();
  taint.since_unix_seconds = *added;
  if (json.contains("gpuInstanceId")) {
    auto instance = CountOf(json, "gpuInstanceId", where, health::kWholeGpu - 1);
    if (!instance) return instance.error();
    taint.gpu_instance_id = static_cast<uint32_t>(*instance);
  }
  return taint;
}

Status ParseHistory(const Json& json, const std::string& where, health::GpuHealth& gpu) {
  auto it = json.find("history");
  if (it == json.end()) return Ok();
  if (!it->is_array() || it->size() > health::kMaxHistory) {
    return InvalidArgument(where + ".history: want a list of at most " +
                           std::to_string(health::kMaxHistory));
  }
  for (size_t i = 0; i < it->size(); ++i) {
    auto entry = ParseEntry((*it)[i], where + ".history[" + std::to_string(i) + "]");
    if (!entry) return entry.error();
    gpu.history.push_back(std::move(*entry));
  }
  return Ok();
}

Result<FaultRecord> ParseRecord(const Json& json, const std::string& where) {
  if (!json.is_object()) return InvalidArgument(where + ": want an object");
  if (auto keys = OnlyKeys(
          json, {"step", "reason", "attempts", "stepSinceMs", "faultedMs", "history", "taint"},
          where);
      !keys) {
    return keys.error();
  }
  FaultRecord record;
  health::GpuHealth& gpu = record.health;
  auto step = TextOf(json, "step", where);
  if (!step) return step.error();
  auto parsed = health::ParseRecoveryStep(*step);
  if (!parsed) return parsed.error().WithContext(where + ".step");
  gpu.step = *parsed;
  auto reason = TextOf(json, "reason", where);
  auto attempts = CountOf(json, "attempts", where, 1000);
  auto since = CountOf(json, "stepSinceMs", where);
  auto faulted = CountOf(json, "faultedMs", where);
  if (!reason) return reason.error();
  if (!attempts) return attempts.error();
  if (!since) return since.error();
  if (!faulted) return faulted.error();
  gpu.reason = *reason;
  gpu.attempts = static_cast<int>(*attempts);
  gpu.step_since_ms = *since;
  gpu.faulted_ms = *faulted;
  if (auto history = ParseHistory(json, where, gpu); !history) return history.error();
  if (gpu.in_service()) return record;
  if (!json.contains("taint")) return InvalidArgument(where + ".taint: required out of service");
  auto taint = ParseTaint(json["taint"], where + ".taint");
  if (!taint) return taint.error();
  record.taint = std::move(*taint);
  record.taint.reason = gpu.reason;
  return record;
}

}  // namespace fault_state_detail

std::string SerializeFaultState(const FaultState& state) {
  using fault_state_detail::Json;
  Json out = {{"version", 1}, {"gpus", Json::object()}};
  for (const auto& [pci, record] : state)
    out["gpus"][pci] = fault_state_detail::RecordJson(record);
  return out.dump(1) + "\n";
}

Result<FaultState> ParseFaultState(std::string_view text) {
  using fault_state_detail::Json;
  if (auto nesting = CheckJsonNesting(text, "GPU fault state"); !nesting) return nesting.error();
  Json doc = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return InvalidArgument("GPU fault state: not valid JSON");
  if (!doc.is_object()) return InvalidArgument("GPU fault state: want a JSON object");
  if (auto keys = fault_state_detail::OnlyKeys(doc, {"version", "gpus"}, "state"); !keys)
    return keys.error();
  auto version = doc.find("version");
  if (version == doc.end() || !version->is_number_unsigned() || version->get<uint64_t>() != 1)
    return InvalidArgument("version: want 1");
  FaultState state;
  auto gpus = doc.find("gpus");
  if (gpus == doc.end()) return state;
  if (!gpus->is_object()) return InvalidArgument("gpus: want an object keyed by PCI address");
  if (gpus->size() > kMaxFaultStateGpus)
    return InvalidArgument("gpus: more than " + std::to_string(kMaxFaultStateGpus));
  for (const auto& item : gpus->items()) {
    std::string where = "gpus." + Excerpt(item.key(), 40);
    if (!IsPciAddress(item.key()))
      return InvalidArgument(where + ": not a canonical PCI address (0000:18:00.0)");
    auto record = fault_state_detail::ParseRecord(item.value(), where);
    if (!record) return record.error();
    state[item.key()] = std::move(*record);
  }
  return state;
}

Result<FaultState> ReadFaultStateFile(const std::string& path) {
  auto text = ReadBoundedFile(path, kMaxFaultStateBytes);
  if (!text) {
    if (text.error().category == ErrorCategory::kNotFound) return FaultState{};
    return text.error();
  }
  auto parsed = ParseFaultState(*text);
  if (!parsed) return parsed.error().WithContext(path);
  return parsed;
}

Status WriteFaultStateFile(const std::string& path, const FaultState& state) {
  std::error_code ignored;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ignored);
  return WriteFileAtomically(path, SerializeFaultState(state), 0600);
}

}  // namespace tessera::dra

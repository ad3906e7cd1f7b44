// A GPU's health record as JSON: the store's GPU document and the cluster store's GPU records
// carry it under "health". Absent means healthy with no history (records of older builds).
#include <nlohmann/json.hpp>
#include <type_traits>

#include "fleet/fleet.h"

namespace tessera::fleet {
namespace {

using nlohmann::json;

constexpr size_t kMaxHealthText = 1024;
constexpr size_t kMaxHealthDoc = 128 * 1024;

Status HealthText(const json& doc, const char* key, std::string& out, const std::string& where) {
  if (!doc.contains(key)) return Ok();
  const json& value = doc[key];
  if (!value.is_string() || value.get_ref<const std::string&>().size() > kMaxHealthText)
    return InvalidArgument(where + "." + key + ": want a string of at most 1024 bytes");
  out = value.get<std::string>();
  return Ok();
}

template <typename Int>
Status HealthInt(const json& doc, const char* key, Int& out, const std::string& where) {
  if (!doc.contains(key)) return Ok();
  const json& value = doc[key];
  if (!value.is_number_integer()) return InvalidArgument(where + "." + key + ": want an integer");
  if constexpr (std::is_unsigned_v<Int>) {
    if (value.is_number_unsigned()) {
      out = value.get<Int>();
      return Ok();
    }
    if (value.get<int64_t>() < 0) return InvalidArgument(where + "." + key + ": negative");
  }
  out = static_cast<Int>(value.get<int64_t>());
  return Ok();
}

Result<health::FaultEntry> ParseFaultEntry(const json& doc, const std::string& where) {
  if (!doc.is_object()) return InvalidArgument(where + ": want an object");
  health::FaultEntry entry;
  for (auto status :
       {HealthInt(doc, "at_ms", entry.at_ms, where), HealthText(doc, "signal", entry.signal, where),
        HealthInt(doc, "xid", entry.xid, where), HealthText(doc, "class", entry.fault_class, where),
        HealthText(doc, "action", entry.action, where),
        HealthText(doc, "reason", entry.reason, where)})
    if (!status) return status.error();
  return entry;
}

}  // namespace

std::string GpuHealthToJson(const health::GpuHealth& health) {
  json history = json::array();
  for (const auto& entry : health.history)
    history.push_back({{"at_ms", entry.at_ms},
                       {"signal", entry.signal},
                       {"xid", entry.xid},
                       {"class", entry.fault_class},
                       {"action", entry.action},
                       {"reason", entry.reason}});
  return json{{"step", health::RecoveryStepName(health.step)},
              {"reason", health.reason},
              {"attempts", health.attempts},
              {"step_since_ms", health.step_since_ms},
              {"faulted_ms", health.faulted_ms},
              {"history", std::move(history)}}
      .dump();
}

Result<health::GpuHealth> ParseGpuHealthJson(std::string_view text) {
  const std::string where = "health";
  if (text.size() > kMaxHealthDoc) return InvalidArgument(where + ": larger than 128 KiB");
  const json doc = json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return InvalidArgument(where + ": not an object");
  health::GpuHealth health;
  std::string step = "healthy";
  for (auto status :
       {HealthText(doc, "step", step, where), HealthText(doc, "reason", health.reason, where),
        HealthInt(doc, "attempts", health.attempts, where),
        HealthInt(doc, "step_since_ms", health.step_since_ms, where),
        HealthInt(doc, "faulted_ms", health.faulted_ms, where)})
    if (!status) return status.error();
  auto parsed = health::ParseRecoveryStep(step);
  if (!parsed) return parsed.error().WithContext(where + ".step");
  health.step = *parsed;
  if (doc.contains("history")) {
    const json& history = doc["history"];
    if (!history.is_array() || history.size() > health::kMaxHistory)
      return InvalidArgument(where + ".history: want an array of at most " +
                             std::to_string(health::kMaxHistory) + " entries");
    for (size_t i = 0; i < history.size(); ++i) {
      auto entry = ParseFaultEntry(history[i], where + ".history[" + std::to_string(i) + "]");
      if (!entry) return entry.error();
      health.history.push_back(std::move(*entry));
    }
  }
  return health;
}

}  // namespace tessera::fleet

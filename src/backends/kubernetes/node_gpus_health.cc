// A GPU's health as the node agent publishes it with the node's GPUs (and keeps it in its state
// file): the recovery step, the reason, the attempts and a bounded fault history. Pure.
#include <cstdint>

#include "backends/kubernetes/node_gpus.h"
#include "common/untrusted_text.h"

namespace tessera::k8s {
namespace {

// Text that fits its bound as it is; longer text cut to a printable excerpt of the bound (its
// "..." included).
std::string Bounded(const std::string& text, size_t max_bytes) {
  return text.size() <= max_bytes ? text : Excerpt(text, max_bytes - 3);
}

Json FaultEntryJson(const health::FaultEntry& entry) {
  Json out = {{"atMs", entry.at_ms},
              {"signal", Bounded(entry.signal, kMaxHealthNameBytes)},
              {"class", Bounded(entry.fault_class, kMaxHealthNameBytes)},
              {"action", Bounded(entry.action, kMaxHealthNameBytes)},
              {"reason", Bounded(entry.reason, kMaxHealthReasonBytes)}};
  if (entry.xid != 0) out["xid"] = entry.xid;
  return out;
}

// An optional string field of `object` into `out`, at most `max_bytes`.
Status ReadBoundedString(const Json& object, const char* key, size_t max_bytes,
                         const std::string& where, std::string& out) {
  if (!object.contains(key)) return Ok();
  const Json& value = object[key];
  if (!value.is_string()) return InvalidArgument(where + key + ": not a string");
  if (value.get_ref<const std::string&>().size() > max_bytes)
    return InvalidArgument(where + key + ": longer than " + std::to_string(max_bytes) + " bytes");
  out = value.get<std::string>();
  return Ok();
}

// An optional integer field of `object` from `min` to `max` into `out`.
Status ReadBoundedInteger(const Json& object, const char* key, int64_t min, int64_t max,
                          const std::string& where, int64_t& out) {
  if (!object.contains(key)) return Ok();
  const Json& value = object[key];
  // Checked as an integer before it is read as one (1e300 as int64_t is undefined behaviour).
  if (!value.is_number_integer() ||
      (value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(max)) ||
      (!value.is_number_unsigned() && (value.get<int64_t>() < min || value.get<int64_t>() > max)))
    return InvalidArgument(where + key + ": not an integer from " + std::to_string(min) + " to " +
                           std::to_string(max));
  out = value.get<int64_t>();
  return Ok();
}

constexpr int64_t kMaxMs = INT64_MAX;

Result<health::FaultEntry> ParseFaultEntry(const Json& item, const std::string& where) {
  if (!item.is_object()) return InvalidArgument(where + ": not an object");
  health::FaultEntry entry;
  const std::string at = where + ".";
  if (auto s = ReadBoundedInteger(item, "atMs", 0, kMaxMs, at, entry.at_ms); !s) return s.error();
  int64_t xid = 0;
  if (auto s = ReadBoundedInteger(item, "xid", 0, UINT32_MAX, at, xid); !s) return s.error();
  entry.xid = static_cast<uint64_t>(xid);
  if (auto s = ReadBoundedString(item, "signal", kMaxHealthNameBytes, at, entry.signal); !s)
    return s.error();
  if (auto s = ReadBoundedString(item, "class", kMaxHealthNameBytes, at, entry.fault_class); !s)
    return s.error();
  if (auto s = ReadBoundedString(item, "action", kMaxHealthNameBytes, at, entry.action); !s)
    return s.error();
  if (auto s = ReadBoundedString(item, "reason", kMaxHealthReasonBytes, at, entry.reason); !s)
    return s.error();
  return entry;
}

Status ParseHistory(const Json& value, health::GpuHealth& out) {
  if (!value.contains("history")) return Ok();
  const Json& history = value["history"];
  if (!history.is_array()) return InvalidArgument("history: not an array");
  if (history.size() > health::kMaxHistory)
    return InvalidArgument("history: more than " + std::to_string(health::kMaxHistory) +
                           " entries");
  for (size_t i = 0; i < history.size(); ++i) {
    auto entry = ParseFaultEntry(history[i], "history[" + std::to_string(i) + "]");
    if (!entry) return entry.error();
    out.history.push_back(std::move(*entry));
  }
  return Ok();
}

}  // namespace

Json GpuHealthJson(const health::GpuHealth& health) {
  Json history = Json::array();
  const size_t skip =
      health.history.size() > health::kMaxHistory ? health.history.size() - health::kMaxHistory : 0;
  for (size_t i = skip; i < health.history.size(); ++i)
    history.push_back(FaultEntryJson(health.history[i]));
  Json out = {{"step", health::RecoveryStepName(health.step)},
              {"attempts", health.attempts},
              {"sinceMs", health.step_since_ms},
              {"faultedMs", health.faulted_ms},
              {"history", std::move(history)}};
  if (!health.reason.empty()) out["reason"] = Bounded(health.reason, kMaxHealthReasonBytes);
  return out;
}

Result<health::GpuHealth> ParseGpuHealthJson(const Json& value) {
  if (!value.is_object()) return InvalidArgument("not an object");
  health::GpuHealth out;
  if (!value.contains("step") || !value["step"].is_string())
    return InvalidArgument("step: missing");
  const auto& step_name = value["step"].get_ref<const std::string&>();
  auto step = health::ParseRecoveryStep(step_name);
  if (!step) return InvalidArgument("step: unknown (" + Excerpt(step_name) + ")");
  out.step = *step;
  if (auto s = ReadBoundedString(value, "reason", kMaxHealthReasonBytes, "", out.reason); !s)
    return s.error();
  int64_t attempts = 0;
  if (auto s = ReadBoundedInteger(value, "attempts", 0, kMaxHealthAttempts, "", attempts); !s)
    return s.error();
  out.attempts = static_cast<int>(attempts);
  if (auto s = ReadBoundedInteger(value, "sinceMs", 0, kMaxMs, "", out.step_since_ms); !s)
    return s.error();
  if (auto s = ReadBoundedInteger(value, "faultedMs", 0, kMaxMs, "", out.faulted_ms); !s)
    return s.error();
  if (auto s = ParseHistory(value, out); !s) return s.error();
  return out;
}

}  // namespace tessera::k8s

#include "backends/kubernetes/audit_objects.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>

namespace tessera::k8s {
namespace {

constexpr std::string_view kAuditNamePrefix = "tessera-audit-";
constexpr int kAuditSeqDigits = 19;
// Names carry 13 digits of milliseconds: times past year 2255 (or before 1970) are clamped.
constexpr int64_t kLastAuditMs = 9'000'000'000'000;
constexpr size_t kMaxAuditEntry = 1024;  // any entry but detail (fleet::kMaxAuditDetail)

bool IsLabelValue(std::string_view text) {
  if (text.empty() || text.size() > 63) return false;
  auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  if (!alnum(text.front()) || !alnum(text.back())) return false;
  for (char c : text)
    if (!alnum(c) && c != '-' && c != '_' && c != '.') return false;
  return true;
}

Result<std::string> AuditEntryText(const Json& data, const char* key, size_t max) {
  auto found = data.find(key);
  if (found == data.end()) return std::string();
  if (!found->is_string()) return InvalidArgument(fmt::format("audit ConfigMap data.{}", key));
  const auto& text = found->get_ref<const std::string&>();
  if (text.size() > max)
    return InvalidArgument(fmt::format("audit ConfigMap data.{}: longer than {} bytes", key, max));
  return text;
}

}  // namespace

int64_t AuditSeqOf(const fleet::AuditRecord& record, int probe) {
  const int64_t ms = std::clamp<int64_t>(record.time_ms, 0, kLastAuditMs);
  // The content's hash, not a random number: the same record written again has the same name.
  const std::string hash = fleet::Sha256Hex(
      fmt::format("{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}", record.time_ms, record.token_id,
                  record.scope, record.action, record.object_kind, record.object_id, record.tenancy,
                  record.result, record.request_id, record.detail));
  uint64_t drawn = 0;
  std::from_chars(hash.data(), hash.data() + 12, drawn, 16);
  return ms * kAuditSeqPerMs +
         static_cast<int64_t>((drawn + static_cast<uint64_t>(probe)) % kAuditSeqPerMs);
}

std::string AuditConfigMapName(int64_t seq) {
  return fmt::format("{}{:0{}d}", kAuditNamePrefix, seq, kAuditSeqDigits);
}

std::optional<int64_t> AuditSeqOfName(std::string_view name) {
  if (!name.starts_with(kAuditNamePrefix)) return std::nullopt;
  name.remove_prefix(kAuditNamePrefix.size());
  if (name.size() != kAuditSeqDigits) return std::nullopt;
  int64_t seq = 0;
  auto [end, error] = std::from_chars(name.data(), name.data() + name.size(), seq);
  if (error != std::errc() || end != name.data() + name.size() || seq < 0) return std::nullopt;
  return seq;
}

std::string AuditLabelValue(std::string_view text) {
  if (IsLabelValue(text)) return std::string(text);
  return "h-" + fleet::Sha256Hex(text).substr(0, 40);
}

std::string AuditSelector(const fleet::AuditQuery& query) {
  std::string selector = std::string(kAuditLabel) + "=record";
  if (!query.tenancy.empty())
    selector += fmt::format(",{}={}", kAuditTenancyLabel, AuditLabelValue(query.tenancy));
  if (!query.action.empty())
    selector += fmt::format(",{}={}", kAuditActionLabel, AuditLabelValue(query.action));
  return selector;
}

Json AuditConfigMap(const fleet::AuditRecord& record, int64_t seq, const std::string& ns) {
  // No managed-by label: the lists of the records the model loads never page through these.
  Json labels = {{kAuditLabel, "record"}, {kAuditActionLabel, AuditLabelValue(record.action)}};
  if (!record.tenancy.empty()) labels[kAuditTenancyLabel] = AuditLabelValue(record.tenancy);
  return {{"apiVersion", "v1"},
          {"kind", "ConfigMap"},
          {"metadata", {{"name", AuditConfigMapName(seq)}, {"namespace", ns}, {"labels", labels}}},
          {"data",
           {{"time", std::to_string(record.time_ms)},
            {"token", record.token_id},
            {"scope", record.scope},
            {"action", record.action},
            {"objectKind", record.object_kind},
            {"objectId", record.object_id},
            {"tenancy", record.tenancy},
            {"result", record.result},
            {"requestId", record.request_id},
            {"detail", record.detail}}}};
}

Result<fleet::AuditEntry> AuditEntryOf(const Json& config_map) {
  const Json metadata =
      config_map.is_object() ? config_map.value("metadata", Json::object()) : Json();
  const Json name = metadata.is_object() ? metadata.value("name", Json()) : Json();
  auto seq = name.is_string() ? AuditSeqOfName(name.get<std::string>()) : std::nullopt;
  if (!seq) return InvalidArgument("audit ConfigMap: not an audit record's name");
  const Json data = config_map.value("data", Json::object());
  if (!data.is_object()) return InvalidArgument("audit ConfigMap: no data");
  fleet::AuditEntry entry;
  entry.seq = *seq;
  fleet::AuditRecord& record = entry.record;
  auto time = AuditEntryText(data, "time", 24);
  if (!time) return time.error();
  auto [end, error] = std::from_chars(time->data(), time->data() + time->size(), record.time_ms);
  if (time->empty() || error != std::errc() || end != time->data() + time->size())
    return InvalidArgument("audit ConfigMap data.time: not a number of milliseconds");
  const std::pair<const char*, std::string*> texts[] = {
      {"token", &record.token_id},     {"scope", &record.scope},
      {"action", &record.action},      {"objectKind", &record.object_kind},
      {"objectId", &record.object_id}, {"tenancy", &record.tenancy},
      {"result", &record.result},      {"requestId", &record.request_id}};
  for (const auto& [key, out] : texts) {
    auto text = AuditEntryText(data, key, kMaxAuditEntry);
    if (!text) return text.error();
    *out = std::move(*text);
  }
  auto detail = AuditEntryText(data, "detail", fleet::kMaxAuditDetail);
  if (!detail) return detail.error();
  record.detail = std::move(*detail);
  return entry;
}

}  // namespace tessera::k8s

// The operator verbs' tables (admin_views.h).
#include "client/admin_views.h"

#include <cmath>

#include "client/admin_requests.h"
#include "common/untrusted_text.h"

namespace tessera::client {
namespace admin_views_detail {

using nlohmann::json;

const json& Field(const json& object, const char* key) {
  static const json kNull;
  if (!object.is_object()) return kNull;
  auto it = object.find(key);
  return it == object.end() ? kNull : *it;
}

// A Unix-ms field within [1, year 9999], else 0 (printed "-").
int64_t Ms(const json& object, const char* key) {
  const json& value = Field(object, key);
  if (!value.is_number()) return 0;
  const double ms = value.get<double>();
  if (!std::isfinite(ms) || ms < 1 || ms > 253402300799999.0) return 0;
  return static_cast<int64_t>(ms);
}

// The items of `doc[key]`, or `doc` itself as the one item when it is a single object of the
// kind (it has `marker`).
Result<std::vector<const json*>> Items(const json& doc, const char* key, const char* marker) {
  std::vector<const json*> items;
  const json& list = Field(doc, key);
  if (list.is_array()) {
    for (const auto& item : list)
      items.push_back(&item);
    return items;
  }
  if (doc.is_object() && doc.contains(marker) && !doc.contains(key)) {
    items.push_back(&doc);
    return items;
  }
  return Unavailable(std::string("the answer has no ") + key + " list");
}

std::string Limit(const json& value) {
  return value.is_null() ? "unlimited" : Cell(value);
}

std::string RateLimit(const json& limit) {
  if (!limit.is_object()) return "-";
  return Excerpt(Cell(Field(limit, "perSecond")) + "/s burst " + Cell(Field(limit, "burst")),
                 kMaxCellBytes);
}

std::string Labels(const json& labels) {
  if (!labels.is_object() || labels.empty()) return "-";
  std::string text;
  for (const auto& [key, value] : labels.items()) {
    if (!text.empty()) text += ',';
    text += key + "=" + (value.is_string() ? value.get<std::string>() : value.dump());
    if (text.size() > kMaxCellBytes) break;
  }
  return Excerpt(text, kMaxCellBytes);
}

std::string Expires(const json& token) {
  if (Field(token, "expired") == json(true)) return "expired";
  if (Field(token, "expires_ms").is_null()) return "never";
  return FormatTime(Ms(token, "expires_ms"));
}

std::string LastFault(const json& health) {
  const json& fault = Field(health, "last_fault");
  if (!fault.is_object()) return "-";
  const json& xid = Field(fault, "xid");
  std::string what = xid.is_number_integer() ? "Xid " + Cell(xid) : Cell(Field(fault, "signal"));
  return Excerpt(FormatTime(Ms(fault, "at_ms")) + " " + what + " (" + Cell(Field(fault, "class")) +
                     ", " + Cell(Field(fault, "action")) + ")",
                 kMaxCellBytes);
}

std::string Faults(const json& gpu, const std::map<std::string, size_t>& fault_counts) {
  if (!Field(Field(gpu, "health"), "last_fault").is_object()) return "0";
  const json& count = Field(Field(gpu, "health"), "fault_count");
  if (count.is_number_integer() && count.get<int64_t>() >= 0) return Cell(count);
  const json& id = Field(gpu, "id");
  if (!id.is_string()) return "?";
  auto it = fault_counts.find(id.get<std::string>());
  return it == fault_counts.end() ? "?" : std::to_string(it->second);
}

}  // namespace admin_views_detail

using admin_views_detail::Field;
using admin_views_detail::Ms;
using nlohmann::json;

Result<Table> TenancyTable(const json& doc, int64_t now_ms) {
  auto items = admin_views_detail::Items(doc, "tenancies", "uid");
  if (!items) return items.error();
  Table table;
  table.columns = {{"NAME"},    {"WEIGHT"}, {"QUOTA-GPUS"}, {"QUOTA-PENDING"},    {"MAX-PRIORITY"},
                   {"REQUEUE"}, {"AGE"},    {"UID", true},  {"RATE-LIMIT", true}, {"LABELS", true}};
  for (const json* tenancy : *items) {
    const json& quota = Field(*tenancy, "quota");
    table.rows.push_back(
        {Cell(Field(*tenancy, "name")), Cell(Field(*tenancy, "weight")),
         admin_views_detail::Limit(Field(quota, "gpus")),
         admin_views_detail::Limit(Field(quota, "pending")), Cell(Field(*tenancy, "maxPriority")),
         Cell(Field(*tenancy, "requeueOnGpuFault")), FormatAge(Ms(*tenancy, "created_ms"), now_ms),
         Cell(Field(*tenancy, "uid")), admin_views_detail::RateLimit(Field(*tenancy, "rateLimit")),
         admin_views_detail::Labels(Field(*tenancy, "labels"))});
  }
  return table;
}

Result<Table> TokenTable(const json& doc, int64_t now_ms) {
  auto items = admin_views_detail::Items(doc, "tokens", "scope");
  if (!items) return items.error();
  Table table;
  table.columns = {{"ID"},        {"SCOPE"},   {"TENANCY"},      {"AGE"},
                   {"LAST-USED"}, {"EXPIRES"}, {"CREATED", true}};
  for (const json* token : *items) {
    const int64_t last_used = Ms(*token, "last_used_ms");
    table.rows.push_back(
        {Cell(Field(*token, "id")), Cell(Field(*token, "scope")), Cell(Field(*token, "tenancy")),
         FormatAge(Ms(*token, "created_ms"), now_ms),
         last_used ? FormatAge(last_used, now_ms) : "never", admin_views_detail::Expires(*token),
         FormatTime(Ms(*token, "created_ms"))});
  }
  return table;
}

Result<Table> CreatedTokenTable(const json& doc) {
  if (!doc.is_object() || !Field(doc, "token").is_string())
    return Unavailable("the answer has no token");
  Table table;
  table.columns = {{"ID"}, {"SCOPE"}, {"TENANCY"}, {"EXPIRES"}, {"TOKEN"}};
  table.rows.push_back({Cell(Field(doc, "id")), Cell(Field(doc, "scope")),
                        Cell(Field(doc, "tenancy")), admin_views_detail::Expires(doc),
                        Cell(Field(doc, "token"))});
  return table;
}

Result<std::string> CreatedTokenSecret(const json& doc) {
  const json& token = Field(doc, "token");
  if (!token.is_string()) return Unavailable("the answer has no token");
  const auto& secret = token.get_ref<const std::string&>();
  bool printable = secret.size() >= 16 && secret.size() <= 512;
  for (char c : secret)
    printable = printable && c > ' ' && c < 0x7f;
  if (!printable) return Unavailable("the answer's token is not 16 to 512 printable characters");
  return secret;
}

Result<Table> GpuTable(const json& doc, const std::map<std::string, size_t>& fault_counts) {
  auto items = admin_views_detail::Items(doc, "gpus", "pci_address");
  if (!items) return items.error();
  Table table;
  table.columns = {{"ID"},        {"NODE"},         {"MODEL"},           {"STATE"},
                   {"TENANCY"},   {"CONTAINER"},    {"HEALTH"},          {"REASON"},
                   {"PCI", true}, {"FAULTS", true}, {"LAST-FAULT", true}};
  for (const json* gpu : *items) {
    const json& health = Field(*gpu, "health");
    const json& own_reason = Field(*gpu, "reason");
    const bool has_own = own_reason.is_string() && !own_reason.get<std::string>().empty();
    table.rows.push_back(
        {Cell(Field(*gpu, "id")), Cell(Field(*gpu, "node")), Cell(Field(*gpu, "model")),
         Cell(Field(*gpu, "state")), Cell(Field(*gpu, "tenancy")),
         Cell(Field(*gpu, "container_id")), Cell(Field(health, "step")),
         Cell(has_own ? own_reason : Field(health, "reason")), Cell(Field(*gpu, "pci_address")),
         admin_views_detail::Faults(*gpu, fault_counts), admin_views_detail::LastFault(health)});
  }
  return table;
}

std::vector<std::string> GpusWithFaults(const json& doc, size_t max) {
  std::vector<std::string> ids;
  const json& list = Field(doc, "gpus");
  if (!list.is_array()) return ids;
  for (const auto& gpu : list) {
    if (ids.size() >= max) break;
    if (!Field(Field(gpu, "health"), "last_fault").is_object()) continue;
    const json& count = Field(Field(gpu, "health"), "fault_count");
    if (count.is_number_integer() && count.get<int64_t>() >= 0) continue;  // listed already
    const json& id = Field(gpu, "id");
    if (id.is_string() && PathSegment(id.get<std::string>(), "GPU").ok())
      ids.push_back(id.get<std::string>());
  }
  return ids;
}

std::optional<size_t> FaultHistoryCount(const json& gpu) {
  const json& history = Field(Field(gpu, "health"), "history");
  if (!history.is_array()) return std::nullopt;
  return history.size();
}

Result<Table> AuditTable(const json& doc) {
  auto items = admin_views_detail::Items(doc, "records", "seq");
  if (!items) return items.error();
  Table table;
  table.columns = {{"SEQ"},     {"TIME"},   {"TOKEN"},  {"ACTION"},       {"OBJECT"},
                   {"TENANCY"}, {"RESULT"}, {"DETAIL"}, {"REQUEST", true}};
  for (const json* record : *items) {
    const json& object = Field(*record, "object");
    const json& token = Field(*record, "token_id");
    const bool has_token = token.is_string() && !token.get<std::string>().empty();
    table.rows.push_back(
        {Cell(Field(*record, "seq")), FormatTime(Ms(*record, "time_ms")),
         Cell(has_token ? token : Field(*record, "scope")), Cell(Field(*record, "action")),
         Excerpt(Cell(Field(object, "kind")) + "/" + Cell(Field(object, "id")), kMaxCellBytes),
         Cell(Field(*record, "tenancy")), Cell(Field(*record, "result")),
         Cell(Field(*record, "detail")), Cell(Field(*record, "request_id"))});
  }
  return table;
}

}  // namespace tessera::client

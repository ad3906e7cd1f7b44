// What the operator verbs send (admin_requests.h).
#include "client/admin_requests.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "client/duration_flag.h"
#include "common/untrusted_text.h"

namespace tessera::client {
namespace admin_requests_detail {

using nlohmann::json;

bool Unreserved(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '~' || c == '-';
}

Error BadFlag(std::string_view flag, std::string_view value, const std::string& want) {
  return InvalidArgument(std::string(flag) + " " + Excerpt(value, 40) + ": " + want);
}

Result<int64_t> WholeNumber(std::string_view flag, std::string_view text) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end)
    return BadFlag(flag, text, "want a whole number");
  return value;
}

Result<json> Quota(std::string_view flag, std::string_view text) {
  if (text == "unlimited") return json(nullptr);
  auto value = WholeNumber(flag, text);
  if (!value) return BadFlag(flag, text, "want a whole number or unlimited");
  return json(*value);
}

Result<json> Weight(std::string_view text) {
  // strtod needs a terminated string, and would also take blanks, hex and "nan": only a short
  // decimal number gets that far.
  const bool decimal = text.find_first_not_of("0123456789.eE+-") == std::string_view::npos;
  if (text.empty() || text.size() > 32 || !decimal)
    return BadFlag("--weight", text, "want a number");
  const std::string copy(text);
  char* end = nullptr;
  const double value = std::strtod(copy.c_str(), &end);
  if (end != copy.c_str() + copy.size() || !std::isfinite(value))
    return BadFlag("--weight", text, "want a number");
  return json(value);
}

// The policy fields the flags give, into `body` (quota as {gpus, pending} where given).
Status AddPolicyFlags(const TenancyFlagValues& flags, json& body) {
  if (flags.weight) {
    auto weight = Weight(*flags.weight);
    if (!weight) return weight.error();
    body["weight"] = *weight;
  }
  if (flags.max_priority) {
    auto max = WholeNumber("--max-priority", *flags.max_priority);
    if (!max) return max.error();
    body["maxPriority"] = *max;
  }
  if (flags.quota_gpus) {
    auto gpus = Quota("--quota-gpus", *flags.quota_gpus);
    if (!gpus) return gpus.error();
    body["quota"]["gpus"] = *gpus;
  }
  if (flags.quota_pending) {
    auto pending = Quota("--quota-pending", *flags.quota_pending);
    if (!pending) return pending.error();
    body["quota"]["pending"] = *pending;
  }
  return Ok();
}

bool HasPolicyFlag(const TenancyFlagValues& flags) {
  return flags.weight || flags.max_priority || flags.quota_gpus || flags.quota_pending;
}

// --label k=v sets, k- removes (where `removing` is allowed).
Status ApplyLabels(const std::vector<std::string>& labels, bool removing, json& into) {
  for (const auto& label : labels) {
    const auto equals = label.find('=');
    if (equals == std::string::npos && removing && label.size() > 1 && label.back() == '-') {
      into.erase(label.substr(0, label.size() - 1));
      continue;
    }
    if (equals == std::string::npos || equals == 0)
      return BadFlag("--label", label,
                     removing ? "want KEY=VALUE, or KEY- to remove it" : "want KEY=VALUE");
    into[label.substr(0, equals)] = label.substr(equals + 1);
  }
  return Ok();
}

Error NotATenancy(const std::string& why) {
  return Unavailable("the stored tenancy (GET): " + why);
}

// The stored policy as PUT takes it back: weight, maxPriority, quota {gpus, pending}.
Result<json> StoredPolicy(const json& stored) {
  json policy = json::object();
  auto weight = stored.find("weight");
  if (weight == stored.end() || !weight->is_number()) return NotATenancy("weight is not a number");
  policy["weight"] = *weight;
  auto max = stored.find("maxPriority");
  if (max == stored.end() || !max->is_number_integer())
    return NotATenancy("maxPriority is not a whole number");
  policy["maxPriority"] = *max;
  auto quota = stored.find("quota");
  if (quota == stored.end() || !quota->is_object()) return NotATenancy("quota is not an object");
  for (const char* key : {"gpus", "pending"}) {
    auto limit = quota->find(key);
    if (limit == quota->end() || !(limit->is_null() || limit->is_number_integer()))
      return NotATenancy(std::string("quota.") + key + " is not a whole number or null");
    policy["quota"][key] = *limit;
  }
  return policy;
}

}  // namespace admin_requests_detail

using nlohmann::json;

Result<std::string> PathSegment(std::string_view value, std::string_view what) {
  bool ok = !value.empty() && value.size() <= 253 && value != "." && value != "..";
  for (char c : value)
    ok = ok && (admin_requests_detail::Unreserved(c) || c == ':' || c == '@');
  if (!ok)
    return InvalidArgument(std::string(what) + " " + Excerpt(value, 40) +
                           ": want 1 to 253 characters of letters, digits and ._:@~-");
  return std::string(value);
}

Result<json> NewTenancyBody(const TenancyFlagValues& flags) {
  json body = json::object();
  if (auto policy = admin_requests_detail::AddPolicyFlags(flags, body); !policy)
    return policy.error();
  if (flags.requeue_on_gpu_fault) body["requeueOnGpuFault"] = *flags.requeue_on_gpu_fault;
  if (!flags.labels.empty()) {
    json labels = json::object();
    if (auto applied = admin_requests_detail::ApplyLabels(flags.labels, false, labels); !applied)
      return applied.error();
    body["labels"] = std::move(labels);
  }
  return body;
}

Result<json> ChangedTenancyBody(const TenancyFlagValues& flags, const json& stored) {
  using admin_requests_detail::NotATenancy;
  if (!stored.is_object()) return NotATenancy("not a JSON object");
  json body = json::object();
  json labels = json::object();
  if (auto it = stored.find("labels"); it != stored.end() && !it->is_null()) {
    if (!it->is_object()) return NotATenancy("labels is not an object");
    for (const auto& [key, value] : it->items()) {
      if (!value.is_string()) return NotATenancy("label " + Excerpt(key, 40) + " is not a string");
      labels[key] = value;
    }
  }
  if (auto applied = admin_requests_detail::ApplyLabels(flags.labels, true, labels); !applied)
    return applied.error();
  body["labels"] = std::move(labels);
  if (admin_requests_detail::HasPolicyFlag(flags)) {
    auto policy = admin_requests_detail::StoredPolicy(stored);
    if (!policy) return policy.error();
    body.update(*policy);
    if (auto given = admin_requests_detail::AddPolicyFlags(flags, body); !given)
      return given.error();
  }
  if (flags.requeue_on_gpu_fault) body["requeueOnGpuFault"] = *flags.requeue_on_gpu_fault;
  return body;
}

Result<json> TokenRequestBody(std::string_view scope, std::string_view expires, bool metrics) {
  json body = json::object();
  if (!scope.empty()) {
    if (metrics) return InvalidArgument("--scope: a metrics token has no other scope");
    if (scope != "tenant" && scope != "read-only")
      return admin_requests_detail::BadFlag("--scope", scope, "want tenant or read-only");
    body["scope"] = std::string(scope);
  }
  if (!expires.empty()) {
    auto seconds = ParseDurationFlag(expires, "--expires");
    if (!seconds) return seconds.error();
    body["expiresInSeconds"] = *seconds;
  }
  return body;
}

std::string AuditPath(const AuditFilters& filters, size_t page_limit, int64_t after,
                      int64_t now_s) {
  std::string path = "/v1/audit?limit=" + std::to_string(page_limit);
  if (after > 0) path += "&after=" + std::to_string(after);
  if (!filters.tenancy.empty()) path += "&tenancy=" + QueryEscape(filters.tenancy);
  if (!filters.action.empty()) path += "&action=" + QueryEscape(filters.action);
  if (filters.since_s)
    path += "&from=" + std::to_string(std::max<int64_t>(0, now_s - *filters.since_s));
  return path;
}

Result<int64_t> AppendAuditPage(json& records, const json& page, size_t limit, int64_t after) {
  if (!page.is_object() || !page.contains("records") || !page["records"].is_array())
    return Unavailable("GET /v1/audit: the answer has no records list");
  for (const auto& record : page["records"]) {
    // More than was asked for: where the rest would begin is not known.
    if (records.size() >= limit) return int64_t{0};
    records.push_back(record);
  }
  auto next = page.find("next");
  if (next == page.end() || next->is_null()) return int64_t{0};
  if (!next->is_number_integer() || next->get<int64_t>() <= after)
    return Unavailable("GET /v1/audit: the answer's next does not follow the page it ends");
  return next->get<int64_t>();
}

}  // namespace tessera::client

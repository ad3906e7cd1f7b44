#include "serve/queue.h"

#include <spdlog/spdlog.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "common/strict_json.h"
#include "common/untrusted_text.h"

namespace tessera::serve {

using nlohmann::json;

namespace {

// A whole number in [low, high], checked before any conversion; null means `unlimited` when
// that is allowed.
Result<int> BoundedInt(const json& value, const std::string& field, int low, int high,
                       bool null_is_unlimited) {
  if (value.is_null() && null_is_unlimited) return scheduling::kUnlimited;
  const auto number = JsonInt64(value);
  if (!number || *number < low || *number > high)
    return InvalidArgument(field + ": must be a whole number from " + std::to_string(low) + " to " +
                           std::to_string(high) +
                           (null_is_unlimited ? " (or null: unlimited)" : ""));
  return static_cast<int>(*number);
}

constexpr int kPolicyVersion = 2;

}  // namespace

Result<scheduling::TenancyPolicy> ParseTenancyPolicy(std::string_view json_text,
                                                     PolicySource source) {
  auto parsed = ParseStrictJson(json_text, "scheduling policy");
  if (!parsed) return parsed.error();
  const json& doc = *parsed;
  if (!doc.is_object()) return InvalidArgument("scheduling policy: must be a JSON object");
  // Records of an older build wrote null for the default pending quota.
  bool null_pending_is_default = source == PolicySource::kRecord;
  if (source == PolicySource::kRecord && doc.contains("version")) {
    if (JsonInt64(doc["version"]) != kPolicyVersion)
      return InvalidArgument("version: this build reads scheduling policy version " +
                             std::to_string(kPolicyVersion));
    null_pending_is_default = false;
  }
  scheduling::TenancyPolicy policy;
  for (const auto& [key, value] : doc.items()) {
    if (key == "weight") {
      if (!value.is_number() || !std::isfinite(value.get<double>()))
        return InvalidArgument("weight: must be a number");
      policy.weight = value.get<double>();
    } else if (key == "maxPriority") {
      auto max = BoundedInt(value, "maxPriority", scheduling::kMinPriority,
                            scheduling::kMaxPriority, false);
      if (!max) return max.error();
      policy.max_priority = *max;
    } else if (key == "quota") {
      if (value.is_null()) continue;
      if (!value.is_object()) return InvalidArgument("quota: must be an object {gpus, pending}");
      for (const auto& [name, item] : value.items()) {
        if (name == "gpus") {
          auto gpus = BoundedInt(item, "quota.gpus", 0, scheduling::kMaxQuotaGpus, true);
          if (!gpus) return gpus.error();
          policy.quota_gpus = *gpus;
        } else if (name == "pending") {
          if (item.is_null() && null_pending_is_default) continue;
          auto pending = BoundedInt(item, "quota.pending", 0, scheduling::kMaxQuotaPending, true);
          if (!pending) return pending.error();
          policy.quota_pending = *pending;
        } else {
          return InvalidArgument("quota." + Excerpt(name, 40) + ": unknown field (gpus, pending)");
        }
      }
    } else if (key == "version" && source == PolicySource::kRecord) {
      continue;
    } else {
      return InvalidArgument(Excerpt(key, 40) + ": unknown field (weight, quota, maxPriority)");
    }
  }
  if (auto valid = scheduling::ValidateTenancyPolicy(policy); !valid) return valid.error();
  return policy;
}

std::string TenancyPolicyToJson(const scheduling::TenancyPolicy& policy) {
  auto limit = [](int value) {
    return value == scheduling::kUnlimited ? json(nullptr) : json(value);
  };
  json quota = {{"gpus", limit(policy.quota_gpus)}};
  if (policy.quota_pending != scheduling::kDefaultQuota)
    quota["pending"] = limit(policy.quota_pending);
  return json{{"version", kPolicyVersion},
              {"weight", policy.weight},
              {"quota", std::move(quota)},
              {"maxPriority", policy.max_priority}}
      .dump();
}

scheduling::TenancyPolicy PolicyOf(const fleet::Tenancy& record) {
  auto it = record.extensions.find(std::string(kSchedulingExtension));
  if (it == record.extensions.end()) return {};
  auto parsed = ParseTenancyPolicy(it->second, PolicySource::kRecord);
  if (!parsed) {
    spdlog::warn("tenancy {}: stored scheduling policy unreadable: {}", record.name,
                 parsed.error().message);
    return {};
  }
  return *parsed;
}

std::string QueueTenancy(const fleet::ContainerRecord& container) {
  return container.tenancy_uid.empty() ? "name:" + container.spec.tenancy : container.tenancy_uid;
}

scheduling::RequestId RequestIdOf(std::string_view container_id) {
  if (container_id.size() != 18 || !container_id.starts_with("c-")) return 0;
  scheduling::RequestId id = 0;
  const char* begin = container_id.data() + 2;
  const char* end = container_id.data() + container_id.size();
  auto [ptr, ec] = std::from_chars(begin, end, id, 16);
  if (ec != std::errc() || ptr != end) return 0;
  return id;
}

std::string ContainerIdOf(scheduling::RequestId id) {
  char text[19];
  std::snprintf(text, sizeof(text), "c-%016llx", static_cast<unsigned long long>(id));
  return text;
}

scheduling::PendingRequest PendingRequestOf(const fleet::ContainerSpec& spec,
                                            std::string_view container_id, int64_t created_ms) {
  scheduling::PendingRequest request;
  request.id = RequestIdOf(container_id);
  request.tenancy = spec.tenancy;
  // No label: a request is named by its ID (ContainerIdOf), so none is kept per request.
  request.gpus = spec.gpus;
  request.priority = spec.priority;
  request.submitted_s = static_cast<double>(created_ms) / 1000.0;
  if (spec.max_duration_s > 0) request.max_duration_s = static_cast<double>(spec.max_duration_s);
  request.preemptible = spec.preemptible;
  return request;
}

}  // namespace tessera::serve

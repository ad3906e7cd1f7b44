// The queue of GPU containers as the scheduling policy sees it: each tenancy's policy (weight,
// quotas, highest priority) as its record stores it, the request a pending container makes, and
// what the last scheduling pass told each one that still waits (its place and why).
#pragma once

#include <string>
#include <string_view>

#include "common/error.h"
#include "fleet/fleet.h"
#include "scheduling/scheduling.h"

namespace tessera::serve {

// The tenancy record's extension that holds its scheduling policy, as TenancyPolicyToJson writes
// it. The API sets it from `quota`, `weight` and `maxPriority`, never as a raw extension.
inline constexpr std::string_view kSchedulingExtension = "scheduling";

// {"weight": W, "quota": {"gpus": G, "pending": P}, "maxPriority": M}; every field optional
// (absent: its default; a quota of null: unlimited). Strict: unknown fields, wrong types and
// values outside scheduling::ValidateTenancyPolicy's bounds are errors naming the field.
Result<scheduling::TenancyPolicy> ParseTenancyPolicy(std::string_view json_text);
std::string TenancyPolicyToJson(const scheduling::TenancyPolicy& policy);
// The policy a tenancy's record holds (the defaults when none, or when unreadable).
scheduling::TenancyPolicy PolicyOf(const fleet::Tenancy& record);

// Container IDs are "c-" + 16 hex digits: those 64 bits are its request ID in the queue. 0 for
// anything else (never queued).
scheduling::RequestId RequestIdOf(std::string_view container_id);
// The request a pending GPU container makes, submitted at its creation time.
scheduling::PendingRequest PendingRequestOf(const fleet::ContainerSpec& spec,
                                            std::string_view container_id, int64_t created_ms);
inline scheduling::PendingRequest PendingRequestOf(const fleet::ContainerRecord& container) {
  return PendingRequestOf(container.spec, container.id, container.created_ms);
}

// Submissions over the tenancy's pending quota fail with FailedPrecondition and a message that
// starts with this; the API answers them 429.
inline constexpr std::string_view kQuotaRefusal = "tenancy quota: ";
inline bool IsQuotaRefusal(const Error& error) {
  return error.category == ErrorCategory::kFailedPrecondition &&
         std::string_view(error.message).starts_with(kQuotaRefusal);
}

}  // namespace tessera::serve

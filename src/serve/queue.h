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

// Where a policy document comes from. Both read an absent field as its default (quota.pending:
// the operator's default pending quota) and a quota of null as unlimited, except records that an
// older build wrote (without "version"), which held null for the then unlimited default as for
// an unlimited quota: their null pending quota is read as the default.
enum class PolicySource { kApi, kRecord };

// {"weight": W, "quota": {"gpus": G, "pending": P}, "maxPriority": M}; every field optional.
// Strict: unknown fields, duplicate keys, wrong types and values outside
// scheduling::ValidateTenancyPolicy's bounds (whole numbers checked before any conversion, so
// 2^63 and above are refused, never wrapped) are errors naming the field.
Result<scheduling::TenancyPolicy> ParseTenancyPolicy(std::string_view json_text,
                                                     PolicySource source = PolicySource::kApi);
// As a record holds it: {"version": 2, ...}, quota.pending left out while it is the default.
std::string TenancyPolicyToJson(const scheduling::TenancyPolicy& policy);
// The policy a tenancy's record holds (the defaults when none, or when unreadable).
scheduling::TenancyPolicy PolicyOf(const fleet::Tenancy& record);

// The queue's key for a container's tenancy: its incarnation (uid), so that fair share, quotas
// and recent usage belong to one owner of a name. A record of no incarnation (a deleted owner's
// history) is keyed by its name.
std::string QueueTenancy(const fleet::ContainerRecord& container);

// Container IDs are "c-" + 16 hex digits: those 64 bits are its request ID in the queue. 0 for
// anything else (never queued). ContainerIdOf is the other way.
scheduling::RequestId RequestIdOf(std::string_view container_id);
std::string ContainerIdOf(scheduling::RequestId id);
// The request a pending GPU container makes, submitted at its creation time, for its tenancy
// as the queue keys it (QueueTenancy).
scheduling::PendingRequest PendingRequestOf(const fleet::ContainerSpec& spec,
                                            std::string_view container_id, int64_t created_ms);
inline scheduling::PendingRequest PendingRequestOf(const fleet::ContainerRecord& container) {
  auto request = PendingRequestOf(container.spec, container.id, container.created_ms);
  request.tenancy = QueueTenancy(container);
  return request;
}

// Submissions over the tenancy's pending quota fail with FailedPrecondition and a message that
// starts with this; the API answers them 429.
inline constexpr std::string_view kQuotaRefusal = "tenancy quota: ";
inline bool IsQuotaRefusal(const Error& error) {
  return error.category == ErrorCategory::kFailedPrecondition &&
         std::string_view(error.message).starts_with(kQuotaRefusal);
}

}  // namespace tessera::serve

// What the operator verbs send: request bodies from flag values (`tessera tenancy create|set`,
// `token create`), the paths and query strings they call, and the gathering of audit pages.
// Pure. Flag values are the caller's, stored documents the API's: both are checked, and what
// they hold is quoted only as an excerpt.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "client/client.h"
#include "common/error.h"

namespace tessera::client {

// The router takes path segments as they are (no percent-decoding), so an ID or name that goes
// into a path must be 1 to 253 characters of [A-Za-z0-9._:@~-], and not "." or "..";
// InvalidArgument naming `what` otherwise. The API judges the rest (a tenancy's DNS label).
Result<std::string> PathSegment(std::string_view value, std::string_view what);

// `tessera tenancy create|set` flags as typed; nullopt / empty: not given.
struct TenancyFlagValues {
  std::optional<std::string> weight;         // --weight: a number (the API checks 0.001..1000)
  std::optional<std::string> quota_gpus;     // --quota-gpus: a whole number, or "unlimited"
  std::optional<std::string> quota_pending;  // --quota-pending: likewise
  std::optional<std::string> max_priority;   // --max-priority: a whole number
  std::optional<bool> requeue_on_gpu_fault;  // --requeue-on-gpu-fault / --no-requeue-on-gpu-fault
  std::vector<std::string> labels;           // --label k=v (set), k- (remove; set only)
};

// PUT /v1/tenancies/{name}'s body for a new tenancy: what the flags give; the API takes the
// defaults for the rest (and for the policy fields not given, once one is).
Result<nlohmann::json> NewTenancyBody(const TenancyFlagValues& flags);
// PUT's body that changes only what the flags name. PUT replaces labels, and the scheduling
// policy whenever one of its fields is sent, so the body carries the stored tenancy's labels
// (GET /v1/tenancies/{name}) with the flags' changes, and, when a policy flag is given, the
// stored policy with the flags' values. Fields the API keeps when left out (extensions,
// rateLimit, requeueOnGpuFault) are left out unless a flag sets them. Unavailable when the
// stored document is not a tenancy.
Result<nlohmann::json> ChangedTenancyBody(const TenancyFlagValues& flags,
                                          const nlohmann::json& stored);

// `tessera token create`: --scope (tenant, read-only; empty: the API's default) and --expires
// (a duration, empty: never). The body of POST /v1/tenancies/{name}/tokens, or of
// POST /v1/tokens (a metrics token, which takes no scope).
Result<nlohmann::json> TokenRequestBody(std::string_view scope, std::string_view expires,
                                        bool metrics);

// `tessera audit` filters.
struct AuditFilters {
  std::string tenancy;
  std::string action;
  std::optional<int64_t> since_s;  // --since: records of the last since_s seconds
};
// GET /v1/audit's path for one page of at most `page_limit` (1..1000) records after `after`.
std::string AuditPath(const AuditFilters& filters, size_t page_limit, int64_t after, int64_t now_s);
// Appends a page's records to `records` (a JSON array), up to `limit` in all; returns the
// page's `next` (0: no more pages, or the page held more than `limit` allowed). Unavailable when
// the page is not an audit page or its `next` does not move past `after` (a server that would
// page forever).
Result<int64_t> AppendAuditPage(nlohmann::json& records, const nlohmann::json& page, size_t limit,
                                int64_t after);

}  // namespace tessera::client

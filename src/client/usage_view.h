// `tessera usage`: its time bounds from the command line, and the rows of
// GET /v1/tenancies/{name}/usage (per run and a TOTAL, or the series). Pure; the answer is
// hostile (see views.h).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "client/output.h"
#include "common/error.h"

namespace tessera::client {

// A duration as "90s", "30m", "1h", "7d" (a positive whole number and a unit) in seconds, at
// most 100 years; InvalidArgument naming `flag` otherwise.
Result<int64_t> ParseDurationSeconds(std::string_view text, std::string_view flag);

// A time bound (--since, --until): a duration back from `now_ms` ("24h") or an RFC 3339 time
// ("2026-11-29T00:00:00Z", "2026-11-29T01:00:00.5+01:00"), as Unix seconds (>= 0).
Result<int64_t> ParseTimeBound(std::string_view text, int64_t now_ms, std::string_view flag);

// The query of the usage call: from, to (-1: left out) and step (0: none) in seconds.
std::string UsageQuery(const std::string& tenancy, int64_t from_s, int64_t to_s, int64_t step_s);

// The only tenancy a GET /v1/tenancies answer lists (an array of records, or {tenancies: [...]});
// FailedPrecondition asking for --tenancy when it lists none or several.
Result<std::string> OnlyTenancy(const nlohmann::json& tenancies);

// ID, GPUS, STARTED, FINISHED, GPU-HOURS, SM-HOURS, ENERGY-KWH: a row per run, then TOTAL.
Table UsageTable(const nlohmann::json& usage_doc);
// START, GPU-HOURS, SM-HOURS, ENERGY-KWH: a row per bucket of `series`.
Table UsageSeriesTable(const nlohmann::json& usage_doc);

}  // namespace tessera::client

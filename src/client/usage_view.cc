// `tessera usage`'s bounds and rows (usage_view.h).
#include "client/usage_view.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "client/client.h"
#include "client/views.h"
#include "common/untrusted_text.h"

namespace tessera::client {
namespace {

using nlohmann::json;

constexpr int64_t kMaxDurationSeconds = int64_t{100} * 366 * 86400;

// A figure in seconds (or joules) divided by `per` with `decimals`; "-" for null (not measured),
// "?" for what is not a finite number.
std::string Scaled(const json& value, double per, int decimals) {
  if (value.is_null()) return "-";
  if (!value.is_number()) return "?";
  const double d = value.get<double>() / per;
  if (!std::isfinite(d) || std::fabs(d) > 1e15) return "?";
  char text[48];
  std::snprintf(text, sizeof text, "%.*f", decimals, d);
  return text;
}

std::string GpuHours(const json& v) {
  return Scaled(v, 3600.0, 2);
}
std::string SmHours(const json& v) {
  return Scaled(v, 3600.0, 2);
}
std::string KiloWattHours(const json& v) {
  return Scaled(v, 3.6e6, 3);
}

bool AllDigits(std::string_view text, size_t at, size_t count) {
  if (at + count > text.size()) return false;
  for (size_t i = at; i < at + count; ++i)
    if (text[i] < '0' || text[i] > '9') return false;
  return true;
}

int DigitsValue(std::string_view text, size_t at, size_t count) {
  int n = 0;
  for (size_t i = at; i < at + count; ++i)
    n = n * 10 + (text[i] - '0');
  return n;
}

// "YYYY-MM-DDTHH:MM:SS[.fff](Z|+HH:MM|-HH:MM)" to Unix seconds; -1 when it is not one.
int64_t Rfc3339Seconds(std::string_view t) {
  if (!AllDigits(t, 0, 4) || t.size() < 20 || t[4] != '-' || !AllDigits(t, 5, 2) || t[7] != '-' ||
      !AllDigits(t, 8, 2) || (t[10] != 'T' && t[10] != 't' && t[10] != ' ') ||
      !AllDigits(t, 11, 2) || t[13] != ':' || !AllDigits(t, 14, 2) || t[16] != ':' ||
      !AllDigits(t, 17, 2))
    return -1;
  std::tm tm{};
  tm.tm_year = DigitsValue(t, 0, 4) - 1900;
  tm.tm_mon = DigitsValue(t, 5, 2) - 1;
  tm.tm_mday = DigitsValue(t, 8, 2);
  tm.tm_hour = DigitsValue(t, 11, 2);
  tm.tm_min = DigitsValue(t, 14, 2);
  tm.tm_sec = DigitsValue(t, 17, 2);
  if (tm.tm_mon > 11 || tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23 || tm.tm_min > 59 ||
      tm.tm_sec > 60)
    return -1;
  size_t at = 19;
  if (at < t.size() && t[at] == '.') {
    ++at;
    const size_t digits = at;
    while (at < t.size() && t[at] >= '0' && t[at] <= '9' && at - digits < 9)
      ++at;
    if (at == digits) return -1;
  }
  int64_t offset = 0;
  if (at + 1 == t.size() && (t[at] == 'Z' || t[at] == 'z')) {
    offset = 0;
  } else if (at + 6 == t.size() && (t[at] == '+' || t[at] == '-') && AllDigits(t, at + 1, 2) &&
             t[at + 3] == ':' && AllDigits(t, at + 4, 2)) {
    offset = (DigitsValue(t, at + 1, 2) * 3600 + DigitsValue(t, at + 4, 2) * 60) *
             (t[at] == '-' ? -1 : 1);
  } else {
    return -1;
  }
  const int64_t seconds = static_cast<int64_t>(timegm(&tm)) - offset;
  return seconds < 0 ? -1 : seconds;
}

}  // namespace

Result<int64_t> ParseDurationSeconds(std::string_view text, std::string_view flag) {
  const std::string what = std::string(flag) + " " + Excerpt(text, 40);
  if (text.size() < 2 || text.size() > 12 || !AllDigits(text, 0, text.size() - 1))
    return InvalidArgument(what + ": want a duration such as 90s, 30m, 1h or 7d");
  int64_t n = 0;
  for (size_t i = 0; i + 1 < text.size(); ++i)
    n = n * 10 + (text[i] - '0');
  int64_t unit = 0;
  switch (text.back()) {
    case 's':
      unit = 1;
      break;
    case 'm':
      unit = 60;
      break;
    case 'h':
      unit = 3600;
      break;
    case 'd':
      unit = 86400;
      break;
    default:
      return InvalidArgument(what + ": want a unit of s, m, h or d");
  }
  if (n <= 0 || n > kMaxDurationSeconds / unit)
    return InvalidArgument(what + ": want more than 0 and at most 100 years");
  return n * unit;
}

Result<int64_t> ParseTimeBound(std::string_view text, int64_t now_ms, std::string_view flag) {
  if (text.size() > 4 && text[4] == '-') {
    const int64_t seconds = Rfc3339Seconds(text);
    if (seconds < 0)
      return InvalidArgument(std::string(flag) + " " + Excerpt(text, 40) +
                             ": want an RFC 3339 time (2026-11-29T00:00:00Z) or a duration");
    return seconds;
  }
  auto back = ParseDurationSeconds(text, flag);
  if (!back) return back.error();
  return std::max<int64_t>(0, now_ms / 1000 - *back);
}

std::string UsageQuery(const std::string& tenancy, int64_t from_s, int64_t to_s, int64_t step_s) {
  std::string query =
      "/v1/tenancies/" + QueryEscape(tenancy) + "/usage?from=" + std::to_string(from_s);
  if (to_s >= 0) query += "&to=" + std::to_string(to_s);
  if (step_s > 0) query += "&step=" + std::to_string(step_s);
  return query;
}

Result<std::string> OnlyTenancy(const json& tenancies) {
  const json& list = tenancies.is_array() ? tenancies : FieldOf(tenancies, "tenancies");
  if (!list.is_array()) return Unavailable("GET /v1/tenancies: the answer lists no tenancies");
  if (list.size() != 1)
    return FailedPrecondition("the token sees " + std::to_string(list.size()) +
                              " tenancies: name one with --tenancy");
  const json& name = FieldOf(list[0], "name");
  if (!name.is_string() || name.get_ref<const std::string&>().empty())
    return Unavailable("GET /v1/tenancies: the tenancy has no name");
  return name.get<std::string>();
}

Table UsageTable(const json& usage_doc) {
  Table table;
  for (const char* header :
       {"ID", "GPUS", "STARTED", "FINISHED", "GPU-HOURS", "SM-HOURS", "ENERGY-KWH"})
    table.columns.push_back({header, false});
  const json& containers = FieldOf(usage_doc, "containers");
  if (containers.is_array()) {
    for (const json& run : containers) {
      const json& finished = FieldOf(run, "finished_ms");
      table.rows.push_back({ScalarCell(FieldOf(run, "id")), ScalarCell(FieldOf(run, "gpus")),
                            TimeCell(FieldOf(run, "started_ms")),
                            finished.is_null() ? "running" : TimeCell(finished),
                            GpuHours(FieldOf(run, "gpu_seconds")),
                            SmHours(FieldOf(run, "sm_seconds")),
                            KiloWattHours(FieldOf(run, "energy_joules"))});
    }
  }
  table.rows.push_back({"TOTAL", "", "", "", GpuHours(FieldOf(usage_doc, "gpu_seconds")),
                        SmHours(FieldOf(usage_doc, "sm_seconds")),
                        KiloWattHours(FieldOf(usage_doc, "energy_joules"))});
  return table;
}

Table UsageSeriesTable(const json& usage_doc) {
  Table table;
  for (const char* header : {"START", "GPU-HOURS", "SM-HOURS", "ENERGY-KWH"})
    table.columns.push_back({header, false});
  const json& series = FieldOf(usage_doc, "series");
  if (!series.is_array()) return table;
  for (const json& bucket : series)
    table.rows.push_back(
        {TimeCell(FieldOf(bucket, "start_ms")), GpuHours(FieldOf(bucket, "gpu_seconds")),
         SmHours(FieldOf(bucket, "sm_seconds")), KiloWattHours(FieldOf(bucket, "energy_joules"))});
  return table;
}

}  // namespace tessera::client

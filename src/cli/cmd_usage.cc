// `tessera usage`: a tenancy's metered GPU time (GET /v1/tenancies/{name}/usage), per run with a
// total, or per bucket of --step; the tenancy is the only one the token sees unless named.
#include <chrono>
#include <cstdio>
#include <memory>

#include "cli/api_session.h"
#include "cli/commands.h"
#include "client/usage_view.h"
#include "client/views.h"

namespace tessera::cli {
namespace {

using nlohmann::json;

struct UsageFlags {
  ApiFlags api;
  OutputFlags output;
  std::string tenancy;
  std::string since, until, step;
};

// The window in Unix seconds: from (0: the beginning), to (-1: now), step (0: none). A series
// without --since covers the last 24 hours.
struct UsageWindow {
  int64_t from_s = 0, to_s = -1, step_s = 0;
};

UsageWindow UsageWindowOf(const UsageFlags& flags) {
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  UsageWindow window;
  auto check = [](auto result) {
    if (!result) Fail(result.error());
    return *result;
  };
  if (!flags.step.empty())
    window.step_s = check(client::ParseDurationSeconds(flags.step, "--step"));
  std::string since = flags.since;
  if (since.empty() && window.step_s > 0) since = "24h";
  if (!since.empty()) window.from_s = check(client::ParseTimeBound(since, now_ms, "--since"));
  if (!flags.until.empty())
    window.to_s = check(client::ParseTimeBound(flags.until, now_ms, "--until"));
  return window;
}

void Usage(const UsageFlags& flags) {
  const UsageWindow window = UsageWindowOf(flags);
  ApiSession session = ConnectOrFail(flags.api);
  std::string tenancy = flags.tenancy;
  if (tenancy.empty()) {
    auto tenancies = session.Json("GET", "/v1/tenancies");
    if (!tenancies) Fail(tenancies.error());
    auto only = client::OnlyTenancy(*tenancies);
    if (!only) Fail(only.error());
    tenancy = *only;
  }
  auto doc =
      session.Json("GET", client::UsageQuery(tenancy, window.from_s, window.to_s, window.step_s));
  if (!doc) Fail(doc.error());
  PrintOutput(flags.output, *doc,
              window.step_s > 0 ? client::UsageSeriesTable(*doc) : client::UsageTable(*doc));
  // The API lists at most 1,000 runs (the total covers them all); say so when it left some out.
  const json& total = client::FieldOf(*doc, "containers_total");
  const json& runs = client::FieldOf(*doc, "containers");
  if (window.step_s == 0 && total.is_number() && runs.is_array() &&
      client::IntOf(total) > static_cast<int64_t>(runs.size()) &&
      (flags.output.format == "table" || flags.output.format == "csv"))
    std::fprintf(stderr, "tessera: %zu of %lld runs listed; TOTAL covers them all\n", runs.size(),
                 static_cast<long long>(client::IntOf(total)));
}

}  // namespace

void AddUsageCommand(CLI::App& app) {
  auto flags = std::make_shared<UsageFlags>();
  CLI::App* usage = app.add_subcommand(
      "usage", "A tenancy's metered GPU time: per container with a total, or a series (--step)");
  usage->add_option("--tenancy", flags->tenancy,
                    "The tenancy (default: the only one the token sees)");
  usage->add_option("--since", flags->since,
                    "From: a duration back from now (24h, 7d) or an RFC 3339 time (default: the "
                    "beginning; with --step, 24h)");
  usage->add_option("--until", flags->until, "To: a duration back from now or an RFC 3339 time");
  usage->add_option("--step", flags->step, "A series with buckets of this length (1m..1d: 1h)");
  AddApiOptions(usage, flags->api);
  AddOutputOptions(usage, flags->output, {"table", "json", "yaml", "csv"});
  usage->callback([flags] { Usage(*flags); });
}

}  // namespace tessera::cli

// `tessera audit`: the audit trail (admin), oldest first, a page or, with --follow-pages, the
// pages after it up to --limit records, over /v1/audit.
#include <algorithm>
#include <chrono>
#include <memory>

#include "cli/api_session.h"
#include "cli/commands.h"
#include "client/admin_requests.h"
#include "client/admin_views.h"
#include "client/duration_flag.h"

namespace tessera::cli {
namespace audit_cmd {

using nlohmann::json;

// What one page of GET /v1/audit holds at most.
constexpr size_t kMaxPage = 1000;
// What --follow-pages gathers at most: a bound on the client's memory.
constexpr size_t kMaxLimit = 1000000;

struct Flags {
  ApiFlags api;
  OutputFlags output;
  client::AuditFilters filters;
  std::string since;
  int64_t limit = 100;  // signed: a negative value is refused as bad input, not by CLI11
  bool follow_pages = false;
};

void Audit(Flags& flags) {
  // Checked here, not by CLI11, so that it exits 2 as every bad input does.
  if (flags.limit < 1 || flags.limit > static_cast<int64_t>(kMaxLimit))
    Fail(InvalidArgument("--limit " + std::to_string(flags.limit) + ": want 1 to 1000000"));
  if (!flags.since.empty()) {
    auto since = client::ParseDurationFlag(flags.since, "--since");
    if (!since) Fail(since.error());
    flags.filters.since_s = *since;
  }
  const int64_t now_s = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
  const size_t limit = static_cast<size_t>(flags.limit);
  ApiSession session = ConnectOrFail(flags.api);
  json records = json::array();
  int64_t after = 0;
  do {
    const size_t page_limit = std::min(kMaxPage, limit - records.size());
    auto page = session.Json("GET", client::AuditPath(flags.filters, page_limit, after, now_s));
    if (!page) Fail(page.error());
    auto next = client::AppendAuditPage(records, *page, limit, after);
    if (!next) Fail(next.error());
    after = *next;
  } while (flags.follow_pages && after != 0 && records.size() < limit);
  json doc = {{"records", std::move(records)}};
  if (after != 0) doc["next"] = after;  // more records follow
  auto table = client::AuditTable(doc);
  if (!table) Fail(table.error());
  PrintOutput(flags.output, doc, *table);
}

}  // namespace audit_cmd

void AddAuditCommand(CLI::App& app) {
  auto flags = std::make_shared<audit_cmd::Flags>();
  CLI::App* audit = app.add_subcommand(
      "audit", "The audit trail, oldest first: who changed what, and what was refused (admin)");
  AddApiOptions(audit, flags->api);
  AddOutputOptions(audit, flags->output);
  audit->add_option("--tenancy", flags->filters.tenancy, "Only this tenancy's records");
  audit->add_option("--action", flags->filters.action,
                    "Only this action's records (such as container.create, tenancy.put)");
  audit->add_option("--since", flags->since, "Only records of the last 24h, 30m, 7d...");
  audit->add_option("--limit", flags->limit, "At most this many records (1 to 1,000,000)")
      ->capture_default_str();
  audit->add_flag("--follow-pages", flags->follow_pages,
                  "Read the pages that follow the first, up to --limit records");
  audit->callback([flags] { audit_cmd::Audit(*flags); });
}

}  // namespace tessera::cli

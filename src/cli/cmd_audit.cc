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

struct Flags {
  ApiFlags api;
  OutputFlags output;
  client::AuditFilters filters;
  std::string since;
  size_t limit = 100;
  bool follow_pages = false;
};

void Audit(Flags& flags) {
  if (!flags.since.empty()) {
    auto since = client::ParseDurationFlag(flags.since, "--since");
    if (!since) Fail(since.error());
    flags.filters.since_s = *since;
  }
  const int64_t now_s = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
  ApiSession session = ConnectOrFail(flags.api);
  json records = json::array();
  int64_t after = 0;
  do {
    const size_t page_limit = std::min(kMaxPage, flags.limit - records.size());
    auto page = session.Json("GET", client::AuditPath(flags.filters, page_limit, after, now_s));
    if (!page) Fail(page.error());
    auto next = client::AppendAuditPage(records, *page, flags.limit, after);
    if (!next) Fail(next.error());
    after = *next;
  } while (flags.follow_pages && after != 0 && records.size() < flags.limit);
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
  audit->add_option("--limit", flags->limit, "At most this many records")
      ->check(CLI::Range(size_t{1}, size_t{1000000}))
      ->capture_default_str();
  audit->add_flag("--follow-pages", flags->follow_pages,
                  "Read the pages that follow the first, up to --limit records");
  audit->callback([flags] { audit_cmd::Audit(*flags); });
}

}  // namespace tessera::cli

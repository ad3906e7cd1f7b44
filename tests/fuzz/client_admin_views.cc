// The operator verbs' pure parts on hostile bytes: the input, as JSON, is every answer the verbs
// read (tenancy, token, GPU and audit listings, a created token, a stored tenancy sent back by
// `tenancy set`, an audit page), and as text a duration flag and a path segment. Every table cell
// must be printable ASCII of bounded length, a token secret printed whole must be printable, a
// `set` body must keep only string labels, and nothing may crash.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "client/admin_requests.h"
#include "client/admin_views.h"
#include "client/duration_flag.h"

namespace {

using nlohmann::json;
using namespace tessera::client;

void CheckTable(const tessera::Result<Table>& table) {
  if (!table) return;
  for (const auto& row : table->rows) {
    if (row.size() != table->columns.size()) std::abort();
    for (const auto& cell : row) {
      if (cell.size() > kMaxCellBytes + 3) std::abort();
      for (char c : cell)
        if (c < 0x20 || c > 0x7e) std::abort();
    }
  }
  (void)RenderTable(*table, true, true);
  (void)RenderCsv(*table, true);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  (void)ParseDurationFlag(text, "--since");
  if (auto segment = PathSegment(text, "ID"); segment && segment->find('/') != std::string::npos)
    std::abort();
  const json doc = json::parse(text, nullptr, false);
  if (doc.is_discarded()) return 0;
  CheckTable(TenancyTable(doc, 1800000000000));
  CheckTable(TokenTable(doc, 1800000000000));
  CheckTable(CreatedTokenTable(doc));
  CheckTable(GpuTable(doc, {{"0000:18:00.0", 3}}));
  CheckTable(AuditTable(doc));
  (void)GpusWithFaults(doc, 16);
  (void)FaultHistoryCount(doc);
  if (auto secret = CreatedTokenSecret(doc)) {
    for (char c : *secret)
      if (c <= 0x20 || c > 0x7e) std::abort();
  }
  TenancyFlagValues flags;
  flags.weight = "2";
  flags.labels = {"team=vision", "tier-"};
  if (auto body = ChangedTenancyBody(flags, doc)) {
    for (const auto& [key, value] : (*body)["labels"].items())
      if (!value.is_string()) std::abort();
  }
  json records = json::array();
  (void)AppendAuditPage(records, doc, 10, 0);
  if (records.size() > 10) std::abort();
  return 0;
}

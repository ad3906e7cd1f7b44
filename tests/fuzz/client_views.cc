// Fuzzes the read verbs' rows (`tessera ps`, `queue`, `usage`) with whatever a server at
// --server could answer: the input, nesting checked as the client's session checks it, parsed
// as JSON and given to every row builder as a list, a queue and a usage document; and the raw
// text as --since/--step. Never a crash; every cell printable ASCII of a bounded length.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "client/usage_view.h"
#include "client/views.h"
#include "common/untrusted_text.h"

namespace {

void CheckCells(const tessera::client::Table& table) {
  for (const auto& row : table.rows) {
    if (row.size() != table.columns.size()) std::abort();
    for (const auto& cell : row) {
      // Composite cells (MIG "PROFILExCOUNT") join two cut cells.
      if (cell.size() > 2 * tessera::client::kMaxCellBytes + 8) std::abort();
      for (char c : cell)
        if (c < 0x20 || c > 0x7e) std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using nlohmann::json;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  constexpr int64_t kNow = 1764446172000;
  (void)tessera::client::ParseTimeBound(text, kNow, "--since");
  (void)tessera::client::ParseDurationSeconds(text, "--step");
  if (!tessera::CheckJsonNesting(text, "answer").ok()) return 0;
  json doc = json::parse(text, nullptr, false);
  if (doc.is_discarded()) return 0;
  CheckCells(tessera::client::ContainersTable(doc, kNow));
  CheckCells(tessera::client::ContainersTable(tessera::client::FieldOf(doc, "containers"), kNow));
  CheckCells(tessera::client::QueueTable(doc, kNow));
  CheckCells(tessera::client::QueueSharesTable(doc));
  CheckCells(tessera::client::UsageTable(doc));
  CheckCells(tessera::client::UsageSeriesTable(doc));
  (void)tessera::client::OnlyTenancy(doc);
  (void)tessera::client::RenderCsv(tessera::client::UsageTable(doc), true);
  return 0;
}

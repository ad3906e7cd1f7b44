// A hostile server's answer as the `tessera` client reads it: the first byte picks where the bytes
// are cut in two (as two reads would bring them), the rest goes through ResponseReader; a complete
// answer's body then goes where the verbs send it: a JSON document through `tessera doctor`'s GPU
// faults, `tessera top`'s frame and every output format. Whatever the bytes: no crash, a body
// never over its bound, and table cells of printable ASCII only.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "client/gpu_faults.h"
#include "client/http_response.h"
#include "client/output.h"
#include "client/top_view.h"
#include "common/untrusted_text.h"

namespace {

using namespace tessera::client;

void Render(const nlohmann::json& doc) {
  (void)ListGpuFaults(doc);
  (void)RenderTop(doc, "fuzz", 0);
  Table table{{{"ID"}, {"VALUE", true}}, {}};
  if (doc.is_object())
    for (const auto& item : doc.items())
      table.rows.push_back({Cell(item.key()), Cell(item.value())});
  for (const auto& row : table.rows)
    for (const auto& cell : row)
      for (char c : cell)
        if (c < 0x20 || c > 0x7e) std::abort();
  (void)RenderTable(table, true, true);
  (void)RenderCsv(table, true);
  (void)RenderJson(doc);
  (void)RenderYaml(doc);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t cut = bytes.empty() ? 0 : data[0] % (bytes.size() + 1);
  ResponseReader reader;
  if (!reader.Feed(bytes.substr(0, cut)).ok()) return 0;
  if (!reader.Feed(bytes.substr(cut)).ok()) return 0;
  if (!reader.done() && !reader.Finish().ok()) return 0;
  if (!reader.done()) return 0;
  Response response = reader.Take();
  if (response.body.size() > kMaxResponseBodyBytes) std::abort();
  if (!tessera::CheckJsonNesting(response.body, "answer").ok()) return 0;
  auto doc = nlohmann::json::parse(response.body, nullptr, false);
  if (!doc.is_discarded()) Render(doc);
  return 0;
}

// How the client verbs print what the API answered: a table (the default; `wide` adds columns),
// the API's document as JSON or YAML, or CSV. Pure: the answers come from whatever listens at
// --server, so every cell is cut to printable ASCII and a bounded length.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace tessera::client {

enum class OutputFormat { kTable, kWide, kJson, kYaml, kCsv };
// "table", "wide", "json", "yaml", "csv"; InvalidArgument naming the choices otherwise.
Result<OutputFormat> ParseOutputFormat(std::string_view name);

inline constexpr size_t kMaxCellBytes = 120;

struct Column {
  std::string header;      // upper case, as kubectl and podman print them ("ID", "STATE")
  bool wide_only = false;  // shown with -o wide only
};
struct Table {
  std::vector<Column> columns;
  std::vector<std::vector<std::string>> rows;  // one cell per column
};

// Columns padded to their widest cell and separated by three spaces, no trailing blanks; `wide`
// shows the wide-only columns too; `headers` false leaves out the header line (--no-headers).
std::string RenderTable(const Table& table, bool wide, bool headers);
// RFC 4180: every column, cells with a comma, quote or line break quoted.
std::string RenderCsv(const Table& table, bool headers);
// The document as the API answered it: JSON indented by 2 with a final newline, or block YAML.
std::string RenderJson(const nlohmann::json& doc);
std::string RenderYaml(const nlohmann::json& doc);

// A cell from a value of an answer: a string cut to printable ASCII (Excerpt, kMaxCellBytes), an
// integer or a number as written, a boolean as true/false, null or a missing value as "-".
std::string Cell(const nlohmann::json& value);
// A Unix-ms time as "2026-11-29T19:56:12Z" (UTC); 0 or less: "-".
std::string FormatTime(int64_t ms);
// How long ago `ms` was, seen at `now_ms`, as kubectl prints ages: "45s", "12m", "3h", "5d";
// 0 or less: "-".
std::string FormatAge(int64_t ms, int64_t now_ms);

}  // namespace tessera::client

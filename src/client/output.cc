// The client verbs' output (output.h).
#include "client/output.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <ctime>

#include "common/untrusted_text.h"

namespace tessera::client {
namespace {

bool Shown(const Column& column, bool wide) {
  return wide || !column.wide_only;
}

std::string CsvField(const std::string& cell) {
  if (cell.find_first_of(",\"\r\n") == std::string::npos) return cell;
  std::string quoted = "\"";
  for (char c : cell) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + "\"";
}

void EmitYaml(YAML::Emitter& out, const nlohmann::json& value) {
  if (value.is_object()) {
    out << YAML::BeginMap;
    for (const auto& item : value.items()) {
      out << YAML::Key << item.key() << YAML::Value;
      EmitYaml(out, item.value());
    }
    out << YAML::EndMap;
  } else if (value.is_array()) {
    out << YAML::BeginSeq;
    for (const auto& item : value)
      EmitYaml(out, item);
    out << YAML::EndSeq;
  } else if (value.is_string()) {
    out << YAML::DoubleQuoted << value.get<std::string>();
  } else if (value.is_null()) {
    out << YAML::Null;
  } else {
    out << value.dump();
  }
}

}  // namespace

Result<OutputFormat> ParseOutputFormat(std::string_view name) {
  if (name == "table") return OutputFormat::kTable;
  if (name == "wide") return OutputFormat::kWide;
  if (name == "json") return OutputFormat::kJson;
  if (name == "yaml") return OutputFormat::kYaml;
  if (name == "csv") return OutputFormat::kCsv;
  return InvalidArgument("output format " + Excerpt(name, 20) +
                         ": want table, wide, json, yaml or csv");
}

std::string RenderTable(const Table& table, bool wide, bool headers) {
  std::vector<size_t> widths(table.columns.size(), 0);
  for (size_t i = 0; i < table.columns.size(); ++i) {
    if (headers) widths[i] = table.columns[i].header.size();
    for (const auto& row : table.rows)
      if (i < row.size()) widths[i] = std::max(widths[i], row[i].size());
  }
  auto line = [&](auto cell_of) {
    std::string text;
    for (size_t i = 0; i < table.columns.size(); ++i) {
      if (!Shown(table.columns[i], wide)) continue;
      std::string cell = cell_of(i);
      if (!text.empty()) text += "   ";
      text += cell;
      text.append(widths[i] - std::min(widths[i], cell.size()), ' ');
    }
    while (!text.empty() && text.back() == ' ')
      text.pop_back();
    return text + "\n";
  };
  std::string out;
  if (headers) out += line([&](size_t i) { return table.columns[i].header; });
  for (const auto& row : table.rows)
    out += line([&](size_t i) { return i < row.size() ? row[i] : std::string(); });
  return out;
}

std::string RenderCsv(const Table& table, bool headers) {
  std::string out;
  auto line = [&](auto cell_of) {
    for (size_t i = 0; i < table.columns.size(); ++i) {
      if (i) out += ',';
      out += CsvField(cell_of(i));
    }
    out += "\r\n";
  };
  if (headers) line([&](size_t i) { return table.columns[i].header; });
  for (const auto& row : table.rows)
    line([&](size_t i) { return i < row.size() ? row[i] : std::string(); });
  return out;
}

std::string RenderJson(const nlohmann::json& doc) {
  return doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string RenderYaml(const nlohmann::json& doc) {
  YAML::Emitter out;
  EmitYaml(out, doc);
  return std::string(out.c_str()) + "\n";
}

std::string Cell(const nlohmann::json& value) {
  if (value.is_null()) return "-";
  if (value.is_string()) {
    const auto& text = value.get_ref<const std::string&>();
    return text.empty() ? "-" : Excerpt(text, kMaxCellBytes);
  }
  if (value.is_boolean()) return value.get<bool>() ? "true" : "false";
  if (value.is_number()) return Excerpt(value.dump(), kMaxCellBytes);
  return Excerpt(value.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace),
                 kMaxCellBytes);
}

std::string FormatTime(int64_t ms) {
  if (ms <= 0) return "-";
  std::time_t seconds = static_cast<std::time_t>(ms / 1000);
  std::tm utc{};
  if (!gmtime_r(&seconds, &utc)) return "-";
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

std::string FormatAge(int64_t ms, int64_t now_ms) {
  if (ms <= 0) return "-";
  const int64_t seconds = std::max<int64_t>(0, (now_ms - ms) / 1000);
  if (seconds < 120) return std::to_string(seconds) + "s";
  if (seconds < 120 * 60) return std::to_string(seconds / 60) + "m";
  if (seconds < 48 * 3600) return std::to_string(seconds / 3600) + "h";
  return std::to_string(seconds / 86400) + "d";
}

}  // namespace tessera::client

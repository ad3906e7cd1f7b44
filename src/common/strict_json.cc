#include "common/strict_json.h"

#include <set>
#include <vector>

#include "common/untrusted_text.h"

namespace tessera {

using nlohmann::json;

Result<json> ParseStrictJson(std::string_view text, std::string_view what) {
  // Refused before parsing: nothing later walks a value nested deeper than kMaxJsonDepth.
  if (auto nesting = CheckJsonNesting(text, what); !nesting) return nesting.error();
  std::vector<std::set<std::string>> keys;  // of each object being read, innermost last
  std::string duplicate;
  bool found = false;
  auto callback = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        keys.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case json::parse_event_t::key:
        if (!keys.empty() && !keys.back().insert(parsed.get<std::string>()).second && !found) {
          duplicate = parsed.get<std::string>();
          found = true;
        }
        break;
      default:
        break;
    }
    return true;
  };
  json doc;
  try {
    doc = json::parse(text.begin(), text.end(), callback);
  } catch (const json::exception& e) {
    // The parser's message quotes the last token read, which the sender chose: cut it short.
    return InvalidArgument(std::string(what) + ": invalid JSON: " + Excerpt(e.what(), 160));
  }
  if (found)
    return InvalidArgument(std::string(what) + ": duplicate key \"" + Excerpt(duplicate, 40) +
                           "\"");
  return doc;
}

std::optional<int64_t> JsonInt64(const json& value) {
  if (value.is_number_unsigned()) {
    const auto number = value.get<uint64_t>();
    if (number > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<int64_t>(number);
  }
  if (value.is_number_integer()) return value.get<int64_t>();
  return std::nullopt;
}

Result<int64_t> JsonIntInRange(const json& value, const std::string& field, int64_t low,
                               int64_t high) {
  const auto number = JsonInt64(value);
  if (!number || *number < low || *number > high)
    return InvalidArgument(field + ": must be a whole number from " + std::to_string(low) + " to " +
                           std::to_string(high));
  return *number;
}

}  // namespace tessera

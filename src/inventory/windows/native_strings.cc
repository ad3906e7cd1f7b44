#include "inventory/windows/native_strings.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace tessera::windows::native {
namespace {

void AppendUtf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

void CollectVersions(const nlohmann::json& j, std::vector<SchemaVersion>& out) {
  if (j.is_object()) {
    for (const auto& item : j.items()) {
      if (item.key() == "SupportedSchemaVersions" && item.value().is_array()) {
        for (const auto& v : item.value()) {
          if (v.is_object() && v.contains("Major") && v.contains("Minor") &&
              v["Major"].is_number_integer() && v["Minor"].is_number_integer()) {
            out.push_back({v["Major"].get<int>(), v["Minor"].get<int>()});
          }
        }
      } else {
        CollectVersions(item.value(), out);
      }
    }
  } else if (j.is_array()) {
    for (const auto& v : j)
      CollectVersions(v, out);
  }
}

}  // namespace

std::string Utf16ToUtf8(std::u16string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    uint32_t c = text[i];
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < text.size() && text[i + 1] >= 0xdc00 &&
        text[i + 1] <= 0xdfff) {
      c = 0x10000 + ((c - 0xd800) << 10) + (text[i + 1] - 0xdc00);
      ++i;
    } else if (c >= 0xd800 && c <= 0xdfff) {
      c = 0xfffd;
    }
    AppendUtf8(out, c);
  }
  return out;
}

std::string RegistryString(std::u16string_view data) {
  size_t nul = data.find(u'\0');
  return Utf16ToUtf8(data.substr(0, nul == std::u16string_view::npos ? data.size() : nul));
}

std::vector<std::string> MultiString(std::u16string_view data) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < data.size()) {
    size_t nul = data.find(u'\0', start);
    size_t end = nul == std::u16string_view::npos ? data.size() : nul;
    if (end == start) break;  // the empty string that ends the list
    out.push_back(Utf16ToUtf8(data.substr(start, end - start)));
    start = end + 1;
  }
  return out;
}

std::optional<uint32_t> ClassCodeFromCompatibleIds(const std::vector<std::string>& ids) {
  std::optional<uint32_t> short_form;
  for (const std::string& id : ids) {
    size_t pos = id.find("CC_");
    if (pos == std::string::npos) continue;
    std::string digits;
    for (size_t i = pos + 3; i < id.size() && std::isxdigit(static_cast<unsigned char>(id[i]));
         ++i) {
      digits += id[i];
    }
    if (digits.size() == 6) return static_cast<uint32_t>(std::stoul(digits, nullptr, 16));
    if (digits.size() == 4 && !short_form) {
      short_form = static_cast<uint32_t>(std::stoul(digits, nullptr, 16)) << 8;
    }
  }
  return short_form;
}

std::string FormatDriverVersion(uint64_t version) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%u.%u.%u.%u", static_cast<unsigned>((version >> 48) & 0xffff),
                static_cast<unsigned>((version >> 32) & 0xffff),
                static_cast<unsigned>((version >> 16) & 0xffff),
                static_cast<unsigned>(version & 0xffff));
  return buf;
}

std::vector<SchemaVersion> SchemaVersionsFromServiceProperties(const std::string& json) {
  std::vector<SchemaVersion> out;
  nlohmann::json doc = nlohmann::json::parse(json, nullptr, false);
  if (doc.is_discarded()) return out;
  CollectVersions(doc, out);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace tessera::windows::native

// Tenancy and export name rules (DNS-1123 labels) and the names derived from them.
#include <string>

#include "tenancy/tenancy.h"

namespace tessera::tenancy {
namespace {

bool IsLower(char c) {
  return c >= 'a' && c <= 'z';
}
bool IsDigit(char c) {
  return c >= '0' && c <= '9';
}

// Printable form of a rejected name for an error message (bytes outside ASCII shown as \xNN).
std::string Quote(std::string_view text) {
  std::string out = "\"";
  static const char kHex[] = "0123456789abcdef";
  for (unsigned char c : text.substr(0, 80)) {
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (text.size() > 80) out += "...";
  return out + "\"";
}

Status ValidateLabel(std::string_view name, std::string_view field, size_t max_length,
                     std::string_view what) {
  const std::string where(field);
  if (name.empty()) return InvalidArgument(where + ": empty " + std::string(what) + " name");
  if (name.size() > max_length) {
    return InvalidArgument(where + ": " + Quote(name) + " is longer than " +
                           std::to_string(max_length) + " characters");
  }
  for (char c : name) {
    if (!IsLower(c) && !IsDigit(c) && c != '-') {
      return InvalidArgument(where + ": " + Quote(name) +
                             " may hold only lowercase letters, digits and '-'");
    }
  }
  if (name.front() == '-') {
    return InvalidArgument(where + ": " + Quote(name) + " must start with a letter or digit");
  }
  if (name.back() == '-') {
    return InvalidArgument(where + ": " + Quote(name) + " must end with a letter or digit");
  }
  return Ok();
}

}  // namespace

Status ValidateTenancyName(std::string_view name, std::string_view field) {
  return ValidateLabel(name, field, kMaxTenancyNameLength, "tenancy");
}

Status ValidateExportName(std::string_view name, std::string_view field) {
  return ValidateLabel(name, field, 63, "export");
}

std::string NetworkName(std::string_view tenancy) {
  return std::string(kNetworkPrefix) + std::string(tenancy);
}

std::string PodmanVolumeName(std::string_view tenancy, std::string_view export_name) {
  return std::string(kNetworkPrefix) + std::string(tenancy) + "." + std::string(export_name);
}

}  // namespace tessera::tenancy

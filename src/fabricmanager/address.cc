// Fabric-manager addresses as operators write them: `host[:port]` or `unix:PATH`.
#include <algorithm>
#include <cctype>

#include "common/untrusted_text.h"
#include "fabricmanager/fabricmanager.h"
#include "fabricmanager/nvfm_abi.h"

namespace tessera::fabricmanager {
namespace {

bool IsIpv4(std::string_view text) {
  int parts = 0;
  size_t i = 0;
  while (i <= text.size()) {
    size_t end = text.find('.', i);
    if (end == std::string_view::npos) end = text.size();
    std::string_view part = text.substr(i, end - i);
    if (part.empty() || part.size() > 3) return false;
    int value = 0;
    for (char c : part) {
      if (c < '0' || c > '9') return false;
      value = value * 10 + (c - '0');
    }
    if (value > 255 || (part.size() > 1 && part[0] == '0')) return false;
    ++parts;
    i = end + 1;
  }
  return parts == 4;
}

// RFC 1123 host name: dot-separated labels of letters, digits and '-', not starting or ending
// with '-', 1..63 bytes each, 253 in all.
bool IsHostName(std::string_view text) {
  if (text.empty() || text.size() > 253) return false;
  size_t i = 0;
  while (i <= text.size()) {
    size_t end = text.find('.', i);
    if (end == std::string_view::npos) end = text.size();
    std::string_view label = text.substr(i, end - i);
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-')
      return false;
    for (char c : label) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') return false;
    }
    i = end + 1;
  }
  return true;
}

}  // namespace

std::string FabricAddress::ToString() const {
  if (unix_socket) return "unix:" + path;
  return host + ":" + std::to_string(port);
}

Result<FabricAddress> ParseFabricAddress(std::string_view text) {
  const std::string shown = "fabric manager address \"" + Excerpt(text) + "\"";
  if (text.empty()) return InvalidArgument("fabric manager address: empty");
  FabricAddress address;
  if (text.substr(0, 5) == "unix:") {
    std::string_view path = text.substr(5);
    if (path.empty() || path.front() != '/')
      return InvalidArgument(shown + ": unix: needs an absolute socket path");
    for (char c : path) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
        return InvalidArgument(shown + ": control characters in the socket path");
    }
    if (path.size() >= static_cast<size_t>(nvfm::kMaxStringLength))
      return InvalidArgument(shown + ": socket path longer than " +
                             std::to_string(nvfm::kMaxStringLength - 1) + " bytes");
    address.unix_socket = true;
    address.path = std::string(path);
    return address;
  }
  if (text.front() == '[' || std::count(text.begin(), text.end(), ':') > 1)
    return InvalidArgument(shown +
                           ": IPv6 is not supported (the fabric manager API takes an IPv4 "
                           "address or host name, or unix:PATH)");
  std::string_view host = text;
  if (size_t colon = text.find(':'); colon != std::string_view::npos) {
    host = text.substr(0, colon);
    std::string_view port = text.substr(colon + 1);
    if (port.empty() || port.size() > 5)
      return InvalidArgument(shown + ": port must be a number from 1 to 65535");
    unsigned value = 0;
    for (char c : port) {
      if (c < '0' || c > '9')
        return InvalidArgument(shown + ": port must be a number from 1 to 65535");
      value = value * 10 + static_cast<unsigned>(c - '0');
    }
    if (value == 0 || value > 65535)
      return InvalidArgument(shown + ": port must be a number from 1 to 65535");
    address.port = static_cast<uint16_t>(value);
  }
  // A name made of digits and dots is meant as an IPv4 address: it must be a valid one.
  bool numeric = !host.empty() && host.find_first_not_of("0123456789.") == std::string_view::npos;
  if (numeric ? !IsIpv4(host) : !IsHostName(host))
    return InvalidArgument(shown + ": host must be an IPv4 address or a host name");
  address.host = std::string(host);
  return address;
}

}  // namespace tessera::fabricmanager

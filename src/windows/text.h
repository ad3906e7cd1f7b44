// Small text helpers the Windows module's files share (internal to src/windows).
#pragma once

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <string>

namespace tessera::windows::text {

inline std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](char c) {
    return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  });
  return s;
}

inline std::string Quote(const std::string& s) {
  return "\"" + s + "\"";
}

// `value` in lowercase hex, zero-padded to `digits`.
inline std::string Hex(uint64_t value, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%0*llx", digits, static_cast<unsigned long long>(value));
  return buf;
}

}  // namespace tessera::windows::text

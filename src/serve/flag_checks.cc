#include "serve/flag_checks.h"

#include <arpa/inet.h>

#include <climits>
#include <cstring>
#include <string>
#include <utility>

#include "common/untrusted_text.h"
#include "serve/bounds.h"

namespace tessera::serve {
namespace {

// What an error quotes of a flag's value: enough to recognise it, never a whole argv entry.
constexpr size_t kShownBytes = 120;

std::string Named(std::string_view flag, std::string_view value) {
  return std::string(flag) + " " + Excerpt(value, kShownBytes);
}

}  // namespace

Result<std::chrono::milliseconds> ParseDurationFlag(const DurationFlag& flag,
                                                    std::string_view text) {
  const std::string range = FormatDuration(flag.low) + " to " + FormatDuration(flag.high);
  auto parsed = ParseDuration(text);
  if (!parsed)
    return InvalidArgument(std::string(flag.name) + ": " + parsed.error().message + "; from " +
                           range);
  if (*parsed < flag.low || *parsed > flag.high)
    return InvalidArgument(Named(flag.name, text) + ": must be from " + range);
  return *parsed;
}

Result<uint64_t> ParseSizeFlag(const SizeFlag& flag, std::string_view text) {
  const std::string range = FormatSize(flag.low) + " to " + FormatSize(flag.high);
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9')
    ++digits;
  const std::string_view suffix = text.substr(digits);
  constexpr std::pair<std::string_view, int> kSuffixes[] = {
      {"", 0}, {"Ki", 10}, {"Mi", 20}, {"Gi", 30}, {"Ti", 40}};
  int shift = -1;
  for (const auto& [name, bits] : kSuffixes)
    if (suffix == name) shift = bits;
  // 13 digits and a shift of at most 40 stay far inside 64 bits.
  if (digits == 0 || digits > 13 || shift < 0)
    return InvalidArgument(Named(flag.name, text) +
                           ": want a whole number of bytes, Ki, Mi, Gi or Ti; from " + range);
  const uint64_t bytes = std::stoull(std::string(text.substr(0, digits))) << shift;
  if (bytes < flag.low || bytes > flag.high)
    return InvalidArgument(Named(flag.name, text) + ": must be from " + range);
  return bytes;
}

std::string FormatSize(uint64_t bytes) {
  constexpr std::pair<int, const char*> kUnits[] = {{40, "Ti"}, {30, "Gi"}, {20, "Mi"}, {10, "Ki"}};
  if (bytes != 0) {
    for (const auto& [bits, name] : kUnits)
      if (bytes % (uint64_t{1} << bits) == 0) return std::to_string(bytes >> bits) + name;
  }
  return std::to_string(bytes);
}

std::string FormatDuration(std::chrono::milliseconds duration) {
  const int64_t ms = duration.count();
  struct Unit {
    int64_t ms;
    const char* name;
  };
  constexpr Unit kUnits[] = {
      {24 * 3600 * 1000, "d"}, {3600 * 1000, "h"}, {60 * 1000, "m"}, {1000, "s"}};
  if (ms != 0) {
    for (const Unit& unit : kUnits)
      if (ms % unit.ms == 0) return std::to_string(ms / unit.ms) + unit.name;
  }
  return std::to_string(ms) + "ms";
}

Status CheckPathText(std::string_view flag, std::string_view path) {
  if (path.empty()) return InvalidArgument(std::string(flag) + ": an empty path");
  if (path.size() >= PATH_MAX)
    return InvalidArgument(std::string(flag) + ": a path of " + std::to_string(path.size()) +
                           " bytes; at most " + std::to_string(PATH_MAX - 1));
  for (unsigned char c : path) {
    if (c < 0x20 || c == 0x7f)
      return InvalidArgument(Named(flag, path) + ": a control character in the path");
  }
  return Ok();
}

Status CheckMountSourcePath(std::string_view flag, std::string_view path) {
  if (auto status = CheckPathText(flag, path); !status) return status;
  if (path.front() != '/') return InvalidArgument(Named(flag, path) + ": must be an absolute path");
  if (path == "/") return InvalidArgument(std::string(flag) + " /: must be a directory below /");
  for (char c : path) {
    if (c == ',' || c == '"')
      return InvalidArgument(Named(flag, path) + ": must not hold '" + std::string(1, c) +
                             "' (it goes into podman's --mount, where , separates the fields "
                             "and \" quotes)");
  }
  // Components between slashes: none empty (`//`, a trailing `/`), `.` or `..`.
  size_t start = 1;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    const std::string_view part = path.substr(start, end - start);
    if (part.empty() || part == "." || part == "..")
      return InvalidArgument(Named(flag, path) +
                             ": must be in normal form (no empty, . or .. components, no "
                             "trailing /)");
    start = end + 1;
  }
  return Ok();
}

std::string_view CommandProgram(std::string_view command) {
  const size_t start = command.find_first_not_of(' ');
  if (start == std::string_view::npos) return {};
  const size_t end = command.find(' ', start);
  return command.substr(start, end == std::string_view::npos ? end : end - start);
}

bool IsLoopbackAddress(std::string_view host) {
  const std::string text(host);
  in_addr v4{};
  if (::inet_pton(AF_INET, text.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, text.c_str(), &v6) != 1) return false;
  if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
  return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
}

Status CheckTlsFlags(std::string_view listen_host, const TlsFlags& flags) {
  const bool tls = !flags.cert.empty() || !flags.key.empty();
  if (tls && (flags.cert.empty() || flags.key.empty()))
    return InvalidArgument("--tls-cert and --tls-key: give both (the certificate and its key)");
  if (!flags.client_ca.empty() && !tls)
    return InvalidArgument("--tls-client-ca: needs --tls-cert and --tls-key");
  if (tls && flags.insecure_http)
    return InvalidArgument("--insecure-http with --tls-cert: choose one");
  for (const auto& [flag, path] :
       {std::pair<std::string_view, const std::string&>{"--tls-cert", flags.cert},
        {"--tls-key", flags.key},
        {"--tls-client-ca", flags.client_ca}})
    if (!path.empty())
      if (auto status = CheckPathText(flag, path); !status) return status;
  if (!tls && !flags.insecure_http && !IsLoopbackAddress(listen_host))
    return InvalidArgument(
        "--listen " + Excerpt(listen_host) +
        ": not a loopback address, and without TLS tokens and tenants' data would cross the "
        "network in clear; give --tls-cert and --tls-key, or --insecure-http if plain HTTP "
        "there is meant (behind a TLS proxy, or a trusted network)");
  return Ok();
}

}  // namespace tessera::serve

// podman's k8s-file log format (the CRI container log format): one record per line,
// "<timestamp> <stream> <tag> <text>", tag F for a full line and P for a partial one that the
// next record continues (the runtime splits long lines).
#include "backends/local/local.h"

namespace tessera::backends {
namespace {

// Splits off the next space-separated field; empty when there is no space left.
std::string_view NextField(std::string_view& rest) {
  auto space = rest.find(' ');
  if (space == std::string_view::npos) return {};
  std::string_view field = rest.substr(0, space);
  rest.remove_prefix(space + 1);
  return field;
}

}  // namespace

std::string TextOfCriLog(std::string_view log) {
  std::string out;
  out.reserve(log.size());
  while (!log.empty()) {
    auto newline = log.find('\n');
    std::string_view line = log.substr(0, newline);
    log = newline == std::string_view::npos ? std::string_view() : log.substr(newline + 1);
    const bool terminated = newline != std::string_view::npos;
    std::string_view rest = line;
    std::string_view time = NextField(rest);
    std::string_view stream = NextField(rest);
    std::string_view tag = NextField(rest);
    // The text may itself be empty ("... stdout F " is an empty line), so the tag may end the
    // line without a trailing space.
    if (tag.empty() && (rest == "F" || rest == "P")) {
      tag = rest;
      rest = {};
    }
    bool record = !time.empty() && time.find('T') != std::string_view::npos &&
                  (stream == "stdout" || stream == "stderr") && (tag == "F" || tag == "P");
    if (!record) {
      out.append(line);
      if (terminated) out.push_back('\n');
      continue;
    }
    out.append(rest);
    if (tag == "F") out.push_back('\n');
  }
  return out;
}

}  // namespace tessera::backends

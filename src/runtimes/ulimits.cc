// The --ulimit values the local backend gives containers where podman's defaults cannot be set:
// reading a process's hard limits (/proc/<pid>/limits) and choosing within them. Pure.
#include <algorithm>
#include <charconv>

#include "common/untrusted_text.h"
#include "runtimes/runtimes.h"

namespace tessera::runtimes {
namespace {

// podman's default nofile and nproc for root containers (its RLimitDefaultValue).
constexpr uint64_t kPodmanDefault = 1048576;

// "<soft> <hard> <units>" after the limit's name; the hard one, nullopt for "unlimited".
Result<std::optional<uint64_t>> HardLimit(std::string_view rest, std::string_view name) {
  std::vector<std::string_view> fields;
  size_t at = 0;
  while (at < rest.size() && fields.size() < 3) {
    at = rest.find_first_not_of(' ', at);
    if (at == std::string_view::npos) break;
    size_t end = std::min(rest.find(' ', at), rest.size());
    fields.push_back(rest.substr(at, end - at));
    at = end;
  }
  if (fields.size() < 2) return InvalidArgument(std::string(name) + ": no hard limit");
  std::string_view hard = fields[1];
  if (hard == "unlimited") return std::optional<uint64_t>();
  uint64_t value = 0;
  auto [end, error] = std::from_chars(hard.data(), hard.data() + hard.size(), value);
  if (error != std::errc() || end != hard.data() + hard.size())
    return InvalidArgument(std::string(name) + ": hard limit " + Excerpt(hard) +
                           " is not a number");
  return std::optional<uint64_t>(value);
}

}  // namespace

Result<ProcessLimits> ParseProcLimits(std::string_view text) {
  ProcessLimits limits;
  bool files = false, processes = false;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = std::min(text.find('\n', start), text.size());
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    for (auto [name, out, seen] :
         {std::tuple{std::string_view("Max open files"), &limits.open_files, &files},
          std::tuple{std::string_view("Max processes"), &limits.processes, &processes}}) {
      if (line.substr(0, name.size()) != name) continue;
      auto hard = HardLimit(line.substr(name.size()), name);
      if (!hard) return hard.error();
      *out = *hard;
      *seen = true;
    }
  }
  if (!files || !processes)
    return InvalidArgument(std::string("no \"") + (files ? "Max processes" : "Max open files") +
                           "\" line");
  return limits;
}

std::vector<std::string> UlimitArgsWithin(const std::vector<ProcessLimits>& limits) {
  std::vector<std::string> args;
  for (auto [name, field] : {std::pair{"nofile", &ProcessLimits::open_files},
                             std::pair{"nproc", &ProcessLimits::processes}}) {
    std::optional<uint64_t> lowest;
    for (const auto& process : limits) {
      const auto& hard = process.*field;
      if (hard && (!lowest || *hard < *lowest)) lowest = hard;
    }
    if (!lowest) continue;  // unlimited everywhere: podman's default fits
    uint64_t value = std::min(*lowest, kPodmanDefault);
    args.push_back("--ulimit");
    args.push_back(std::string(name) + "=" + std::to_string(value) + ":" + std::to_string(value));
  }
  return args;
}

}  // namespace tessera::runtimes

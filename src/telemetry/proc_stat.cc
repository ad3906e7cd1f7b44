// /proc/<pid>/stat's start time (proc(5): field 22, `starttime`, in clock ticks after boot).
// Pure. The command name in parentheses is field 2 and the process chooses it (prctl, exec of a
// file named anything): it may hold spaces and ')' itself, so the fields are counted from the
// last ')' on, which the kernel writes right after the name.
#include <charconv>

#include "telemetry/telemetry.h"

namespace tessera::telemetry {

std::optional<uint64_t> StartTicksOfProcStat(std::string_view text) {
  text = text.substr(0, kMaxStatFile);
  const size_t close = text.rfind(')');
  if (close == std::string_view::npos || text.find('(') > close) return std::nullopt;
  std::string_view rest = text.substr(close + 1);
  // Fields 3 (state) to 22 (starttime), each after one space.
  constexpr int kStartField = 22;
  int field = 2;
  while (!rest.empty()) {
    if (rest.front() != ' ') return std::nullopt;
    rest.remove_prefix(1);
    const size_t end = rest.find_first_of(" \n");
    const std::string_view value = rest.substr(0, end);
    if (value.empty()) return std::nullopt;  // the kernel writes one space between fields
    ++field;
    if (field == kStartField) {
      uint64_t ticks = 0;
      auto [at, error] = std::from_chars(value.data(), value.data() + value.size(), ticks);
      if (error != std::errc() || at != value.data() + value.size()) return std::nullopt;
      return ticks;
    }
    if (end == std::string_view::npos || rest[end] == '\n') return std::nullopt;
    rest.remove_prefix(end);
  }
  return std::nullopt;
}

}  // namespace tessera::telemetry

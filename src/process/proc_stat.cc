// /proc/<pid>/stat (proc(5)) as far as tessera needs it. Pure. The command name in parentheses
// is field 2 and the process chooses it (prctl, exec of a file named anything): it may hold
// spaces and ')' itself, so the fields are counted from the last ')' on, which the kernel writes
// right after the name, each after exactly one space.
#include <charconv>

#include "process/process.h"

namespace tessera::process {
namespace {

std::optional<uint64_t> Number(std::string_view text) {
  uint64_t value = 0;
  auto [at, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || at != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

}  // namespace

std::optional<ProcStat> ParseProcStat(std::string_view text) {
  text = text.substr(0, kMaxProcStatBytes);
  const size_t close = text.rfind(')');
  if (close == std::string_view::npos || text.find('(') > close) return std::nullopt;
  std::string_view rest = text.substr(close + 1);
  ProcStat stat;
  // Fields 3 (state), 4 (ppid) ... 22 (starttime).
  for (int field = 3; field <= 22; ++field) {
    if (rest.empty() || rest.front() != ' ') return std::nullopt;
    rest.remove_prefix(1);
    const size_t end = rest.find_first_of(" \n");
    const std::string_view value = rest.substr(0, end);
    if (value.empty()) return std::nullopt;
    if (field == 3) {
      if (value.size() != 1) return std::nullopt;
      stat.state = value[0];
    } else if (field == 4) {
      auto ppid = Number(value);
      if (!ppid || *ppid > UINT32_MAX) return std::nullopt;
      stat.ppid = static_cast<uint32_t>(*ppid);
    } else if (field == 22) {
      auto start = Number(value);
      if (!start) return std::nullopt;
      stat.start_time = *start;
      return stat;
    }
    if (end == std::string_view::npos || rest[end] == '\n') return std::nullopt;
    rest.remove_prefix(end);
  }
  return std::nullopt;
}

}  // namespace tessera::process

// Knowing a daemon by the process tessera started, never by a file: its PID and its start time
// (/proc/<pid>/stat field 22), so a PID the kernel gave to another process since is never taken
// for it. The parsers are pure: bytes in, facts out.
#include <charconv>

#include "mps/mps.h"

namespace tessera::mps {
namespace {

constexpr std::string_view kStateHeader = "tessera-mps-daemon 1\n";

std::optional<uint64_t> Number(std::string_view text) {
  uint64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

// The value of the line "<key> <digits>" at the front of `text`; the rest stays in `text`.
std::optional<uint64_t> TakeField(std::string_view& text, std::string_view key) {
  const size_t end = text.find('\n');
  if (end == std::string_view::npos) return std::nullopt;
  std::string_view line = text.substr(0, end);
  text.remove_prefix(end + 1);
  if (!line.starts_with(key) || line.size() <= key.size() || line[key.size()] != ' ')
    return std::nullopt;
  return Number(line.substr(key.size() + 1));
}

}  // namespace

std::optional<ProcStat> ParseProcStat(std::string_view text) {
  // "pid (comm) S ppid ...": comm may hold any bytes, ')' and spaces included, so the fields
  // are counted from the last ')'.
  const size_t close = text.rfind(')');
  if (close == std::string_view::npos || close + 2 >= text.size() || text[close + 1] != ' ')
    return std::nullopt;
  std::string_view rest = text.substr(close + 2);
  ProcStat stat;
  // Field 3 is the state; field 4 the parent; field 22 the start time (clock ticks after boot).
  for (int field = 3; field <= 22; ++field) {
    const size_t end = rest.find(' ');
    std::string_view value = rest.substr(0, end);
    if (value.empty()) return std::nullopt;
    if (field == 3) {
      if (value.size() != 1) return std::nullopt;
      stat.state = value[0];
    } else if (field == 4) {
      auto ppid = Number(value);
      if (!ppid || *ppid > UINT32_MAX) return std::nullopt;
      stat.ppid = static_cast<uint32_t>(*ppid);
    } else if (field == 22) {
      while (!value.empty() && value.back() == '\n')
        value.remove_suffix(1);
      auto start = Number(value);
      if (!start) return std::nullopt;
      stat.start_time = *start;
      return stat;
    }
    if (end == std::string_view::npos) return std::nullopt;
    rest.remove_prefix(end + 1);
  }
  return std::nullopt;
}

std::string FormatDaemonState(const ProcessIdentity& daemon) {
  return std::string(kStateHeader) + "pid " + std::to_string(daemon.pid) + "\nstart_time " +
         std::to_string(daemon.start_time) + "\n";
}

std::optional<ProcessIdentity> ParseDaemonState(std::string_view text) {
  if (!text.starts_with(kStateHeader)) return std::nullopt;
  text.remove_prefix(kStateHeader.size());
  auto pid = TakeField(text, "pid");
  auto start = pid ? TakeField(text, "start_time") : std::nullopt;
  if (!pid || !start || !text.empty() || *pid == 0 || *pid > INT32_MAX) return std::nullopt;
  return ProcessIdentity{static_cast<uint32_t>(*pid), *start};
}

}  // namespace tessera::mps

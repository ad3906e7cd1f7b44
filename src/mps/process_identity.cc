// Knowing a daemon by the process tessera started, never by a file: its PID and its start time
// (/proc/<pid>/stat field 22, read through process::ParseProcStat), so a PID the kernel gave to
// another process since is never taken for it. The state file's parser is pure.
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

// The daemon's limits: set in the contract's order, read back, and put back when anyone else
// (a client holds the control socket) moved them.
#include <spdlog/spdlog.h>

#include <charconv>

#include "common/untrusted_text.h"
#include "mps/guarded_files.h"
#include "mps/mps.h"

namespace tessera::mps {
namespace {

// The unit the limit commands speak ("20480M").
constexpr uint64_t kLimitUnit = uint64_t{1} << 20;

std::string Trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '\r'))
    text.pop_back();
  return text;
}

std::optional<double> ParsePercentage(std::string_view text) {
  double value = -1;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

}  // namespace

std::vector<uint32_t> internal::PidsOfAnswer(std::string_view output) {
  std::vector<uint32_t> pids;
  size_t start = 0;
  while (start < output.size() && pids.size() < 256) {
    size_t end = output.find('\n', start);
    if (end == std::string_view::npos) end = output.size();
    std::string_view line = output.substr(start, end - start);
    while (!line.empty() && (line.back() == ' ' || line.back() == '\r'))
      line.remove_suffix(1);
    uint32_t pid = 0;
    auto [at, error] = std::from_chars(line.data(), line.data() + line.size(), pid);
    if (error == std::errc() && at == line.data() + line.size() && pid != 0) pids.push_back(pid);
    start = end + 1;
  }
  return pids;
}

std::optional<uint64_t> ParseMemoryLimitAnswer(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '\r'))
    text.remove_suffix(1);
  if (text.empty() || text.size() > 32) return std::nullopt;
  uint64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end == text.data()) return std::nullopt;
  std::string_view unit = text.substr(static_cast<size_t>(end - text.data()));
  if (unit.ends_with("B") || unit.ends_with("b")) unit.remove_suffix(1);
  int shift = 0;
  if (unit == "")
    shift = 0;
  else if (unit == "K" || unit == "k")
    shift = 10;
  else if (unit == "M")
    shift = 20;
  else if (unit == "G")
    shift = 30;
  else if (unit == "T")
    shift = 40;
  else
    return std::nullopt;
  if (shift > 0 && value > (UINT64_MAX >> shift)) return std::nullopt;
  return value << shift;
}

Status Daemon::ApplyLimits(bool running_servers) {
  for (const std::string& command : DefaultLimitCommands(config_)) {
    if (auto out = Command(command); !out) return out.error();
  }
  if (running_servers) {
    // The defaults reach only servers started after them; running ones get the same limits.
    auto servers = Command("get_server_list");
    if (!servers) return servers.error();
    for (uint32_t server : internal::PidsOfAnswer(*servers)) {
      for (const std::string& command :
           {"set_device_pinned_mem_limit " + std::to_string(server) + " 0 " +
                std::to_string(config_.pinned_memory_limit_bytes / kLimitUnit) + "M",
            "set_active_thread_percentage " + std::to_string(server) + " " +
                std::to_string(config_.active_thread_percentage)}) {
        if (auto out = Command(command); !out) return out.error();
      }
    }
  }
  // The daemon must say back what it was given before any client may come.
  auto drift = LimitDrift();
  if (!drift) return drift.error();
  if (!drift->empty())
    return FailedPrecondition("MPS control daemon of " + config_.gpu_uuid + " reports " + *drift);
  return Ok();
}

Result<std::string> Daemon::LimitDrift() {
  auto percentage = Command("get_default_active_thread_percentage");
  if (!percentage) return percentage.error();
  std::string drift;
  const std::string text = Trimmed(*percentage);
  const auto value = ParsePercentage(text);
  if (!value || *value != static_cast<double>(config_.active_thread_percentage))
    drift = "active thread percentage \"" + Excerpt(text, 20) + "\", not " +
            std::to_string(config_.active_thread_percentage);
  auto memory = Command("get_default_device_pinned_mem_limit 0");
  if (!memory) return memory.error();
  const std::string limit_text = Trimmed(*memory);
  const uint64_t want = config_.pinned_memory_limit_bytes / kLimitUnit * kLimitUnit;
  const auto limit = ParseMemoryLimitAnswer(limit_text);
  if (!limit || *limit != want)
    drift += (drift.empty() ? "" : "; ") + std::string("pinned memory limit \"") +
             Excerpt(limit_text, 24) + "\", not " + std::to_string(want / kLimitUnit) + "M";
  return drift;
}

}  // namespace tessera::mps

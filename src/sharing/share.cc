// Share requests: modes, enforcement labels, range checks, the `--share` flag and the fraction a
// share is metered as.
#include <fmt/format.h>

#include <algorithm>

#include "common/untrusted_text.h"
#include "sharing/sharing.h"

namespace tessera::sharing {

const char* ModeName(Mode mode) {
  return mode == Mode::kTimeslice ? "timeslice" : "mps";
}

Result<Mode> ParseMode(std::string_view name) {
  if (name == "mps") return Mode::kMps;
  if (name == "timeslice") return Mode::kTimeslice;
  return InvalidArgument(fmt::format("mode \"{}\": want mps or timeslice", Excerpt(name, 20)));
}

const char* EnforcementName(Enforcement enforcement) {
  switch (enforcement) {
    case Enforcement::kHardware:
      return "hardware";
    case Enforcement::kDriver:
      return "driver";
    case Enforcement::kWatchdog:
      return "watchdog";
    case Enforcement::kNone:
      return "none";
  }
  return "none";
}

Enforcement EnforcementOf(Mode mode, bool watchdog_running) {
  if (mode == Mode::kMps) return Enforcement::kDriver;
  return watchdog_running ? Enforcement::kWatchdog : Enforcement::kNone;
}

Status CheckShare(const Share& share) {
  if (share.memory_bytes < kMinShareMemory || share.memory_bytes > kMaxShareMemory)
    return InvalidArgument("memory: " + FormatMemory(share.memory_bytes) +
                           " is out of range (256Mi..4Ti)");
  if (share.compute_percent < 1 || share.compute_percent > 100)
    return InvalidArgument("compute: " + std::to_string(share.compute_percent) +
                           " is out of range (1..100 percent)");
  if (!share.mig_profile.empty()) {
    if (auto status = CheckMigProfile(share.mig_profile); !status) return status;
    // Inside a MIG slice only MPS limits a share: a time-slice is the whole GPU's setting.
    if (share.mode != Mode::kMps)
      return InvalidArgument("mode: a share of a MIG slice is an MPS share (mode mps)");
  }
  return Ok();
}

Result<Share> ParseShareFlag(std::string_view text) {
  if (text.size() > 64 + kMaxMigProfileLength) return InvalidArgument("--share: too long");
  // "3g.40gb:10Gi,50": a share of a MIG slice of that profile.
  std::string_view profile;
  if (const size_t colon = text.find(':'); colon != std::string_view::npos) {
    profile = text.substr(0, colon);
    text.remove_prefix(colon + 1);
    if (auto status = CheckMigProfile(profile); !status)
      return status.error().WithContext("--share");
  }
  if (text.size() > 64) return InvalidArgument("--share: too long");
  std::vector<std::string_view> parts;
  for (size_t start = 0;;) {
    const size_t comma = text.find(',', start);
    parts.push_back(text.substr(start, comma == std::string_view::npos ? comma : comma - start));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  if (parts.size() < 2 || parts.size() > 3)
    return InvalidArgument(fmt::format(
        "--share \"{}\": want [MIG-PROFILE:]MEMORY,COMPUTE[,mps|timeslice] (e.g. 20Gi,25)",
        Excerpt(text, 40)));
  Share share;
  share.mig_profile = std::string(profile);
  auto memory = ParseMemory(parts[0]);
  if (!memory) return memory.error().WithContext("--share");
  share.memory_bytes = *memory;
  const std::string_view compute = parts[1];
  if (compute.empty() || compute.size() > 3 ||
      !std::all_of(compute.begin(), compute.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return InvalidArgument(
        fmt::format("--share: compute \"{}\": want a percentage 1..100", Excerpt(compute, 20)));
  share.compute_percent = std::stoi(std::string(compute));
  if (parts.size() == 3) {
    auto mode = ParseMode(parts[2]);
    if (!mode) return mode.error().WithContext("--share");
    share.mode = *mode;
  }
  if (auto status = CheckShare(share); !status) return status.error().WithContext("--share");
  return share;
}

double Fraction(const Share& share, uint64_t gpu_memory_bytes) {
  const double memory = gpu_memory_bytes == 0 ? 1.0
                                              : static_cast<double>(share.memory_bytes) /
                                                    static_cast<double>(gpu_memory_bytes);
  // Time-slicing limits nothing: a time-sliced share can take all of the GPU's compute, and is
  // billed as what it can take, whatever compute it asked for.
  const double compute =
      share.mode == Mode::kTimeslice ? 1.0 : static_cast<double>(share.compute_percent) / 100.0;
  return std::min(1.0, std::max(memory, compute));
}

}  // namespace tessera::sharing

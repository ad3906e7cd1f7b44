// What the Monitor makes of NVML events, NVML state and sysfs counters. Pure.
#include "health/watch/signals.h"

#include <charconv>

namespace tessera::health {

std::optional<Signal> EventSignal(const nvml::Event& event, const std::string& pci, int64_t at_ms) {
  Signal signal;
  signal.gpu = pci;
  signal.at_ms = at_ms;
  if (event.type & nvml::kEventXidCriticalError) {
    signal.kind = SignalKind::kXid;
    signal.xid = event.data;
  } else if (event.type & nvml::kEventDoubleBitEccError) {
    signal.kind = SignalKind::kDoubleBitEcc;
  } else {
    return std::nullopt;
  }
  // NVML names no instance with 0xFFFFFFFF, as kWholeGpu does.
  signal.gpu_instance_id = event.gpu_instance_id;
  signal.compute_instance_id = event.compute_instance_id;
  return signal;
}

std::optional<RecoveryAction> RecoveryActionOf(uint32_t value) {
  if (value > static_cast<uint32_t>(RecoveryAction::kDrainAndReset)) return std::nullopt;
  return static_cast<RecoveryAction>(value);
}

namespace {

bool TurnedOn(const std::optional<bool>& before, const std::optional<bool>& now) {
  return now.value_or(false) && !before.value_or(false);
}

Signal StateSignal(SignalKind kind, const std::string& pci, const GpuState& now, int64_t at_ms) {
  Signal signal;
  signal.kind = kind;
  signal.gpu = pci;
  signal.at_ms = at_ms;
  signal.recovery_action = now.recovery_action;
  return signal;
}

}  // namespace

std::vector<Signal> StateSignals(const std::string& pci, const GpuState& before,
                                 const GpuState& now, int64_t at_ms) {
  std::vector<Signal> out;
  if (now.lost && !before.lost) out.push_back(StateSignal(SignalKind::kGpuLost, pci, now, at_ms));
  if (TurnedOn(before.remap_pending, now.remap_pending))
    out.push_back(StateSignal(SignalKind::kRemapPending, pci, now, at_ms));
  if (TurnedOn(before.remap_failure, now.remap_failure))
    out.push_back(StateSignal(SignalKind::kRemapFailure, pci, now, at_ms));
  if (TurnedOn(before.retired_pages_pending, now.retired_pages_pending))
    out.push_back(StateSignal(SignalKind::kRetiredPagesPending, pci, now, at_ms));
  if (before.uncorrected_volatile_ecc && now.uncorrected_volatile_ecc &&
      *now.uncorrected_volatile_ecc > *before.uncorrected_volatile_ecc) {
    Signal signal = StateSignal(SignalKind::kUncorrectedEcc, pci, now, at_ms);
    signal.count = *now.uncorrected_volatile_ecc;
    out.push_back(std::move(signal));
  }
  if (now.recovery_action && *now.recovery_action != RecoveryAction::kNone &&
      now.recovery_action != before.recovery_action)
    out.push_back(StateSignal(SignalKind::kRecoveryAction, pci, now, at_ms));
  return out;
}

std::optional<uint64_t> AerCount(std::string_view text, std::string_view name) {
  while (!text.empty()) {
    const size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    if (line.size() <= name.size() || line.substr(0, name.size()) != name ||
        line[name.size()] != ' ')
      continue;
    std::string_view number = line.substr(name.size() + 1);
    uint64_t count = 0;
    auto [at, ec] = std::from_chars(number.data(), number.data() + number.size(), count);
    if (ec != std::errc() || at != number.data() + number.size()) return std::nullopt;
    return count;
  }
  return std::nullopt;
}

namespace {

Signal SysfsSignal(SignalKind kind, const std::string& pci, int64_t at_ms) {
  Signal signal;
  signal.kind = kind;
  signal.gpu = pci;
  signal.at_ms = at_ms;
  return signal;
}

}  // namespace

std::vector<Signal> SysfsSignals(const std::string& pci, const SysfsState& before,
                                 const SysfsState& now, int64_t at_ms) {
  std::vector<Signal> out;
  if (now.gone && !before.gone) out.push_back(SysfsSignal(SignalKind::kDeviceGone, pci, at_ms));
  if (now.config_ones && !before.config_ones)
    out.push_back(SysfsSignal(SignalKind::kConfigAllOnes, pci, at_ms));
  if (before.aer_fatal && now.aer_fatal && *now.aer_fatal > *before.aer_fatal) {
    Signal signal = SysfsSignal(SignalKind::kAerFatal, pci, at_ms);
    signal.count = *now.aer_fatal;
    out.push_back(std::move(signal));
  }
  return out;
}

}  // namespace tessera::health

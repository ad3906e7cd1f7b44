// The names the health module's values have in files, records, logs and metrics.
#include <array>

#include "health/health.h"

namespace tessera::health {

const char* SignalKindName(SignalKind kind) {
  switch (kind) {
    case SignalKind::kXid:
      return "xid";
    case SignalKind::kDoubleBitEcc:
      return "double-bit-ecc";
    case SignalKind::kGpuLost:
      return "gpu-lost";
    case SignalKind::kRemapPending:
      return "remap-pending";
    case SignalKind::kRemapFailure:
      return "remap-failure";
    case SignalKind::kRetiredPagesPending:
      return "retired-pages-pending";
    case SignalKind::kUncorrectedEcc:
      return "uncorrected-ecc";
    case SignalKind::kRecoveryAction:
      return "recovery-action";
    case SignalKind::kAerFatal:
      return "aer-fatal";
    case SignalKind::kConfigAllOnes:
      return "config-all-ones";
    case SignalKind::kDeviceGone:
      return "device-gone";
    case SignalKind::kFabricFatal:
      return "fabric-fatal";
  }
  return "unknown";
}

const char* RecoveryActionName(RecoveryAction action) {
  switch (action) {
    case RecoveryAction::kNone:
      return "none";
    case RecoveryAction::kGpuReset:
      return "gpu-reset";
    case RecoveryAction::kNodeReboot:
      return "node-reboot";
    case RecoveryAction::kDrainP2p:
      return "drain-p2p";
    case RecoveryAction::kDrainAndReset:
      return "drain-and-reset";
  }
  return "unknown";
}

namespace {

constexpr std::array<std::pair<FaultClass, const char*>, 6> kFaultClassNames{{
    {FaultClass::kApplication, "application"},
    {FaultClass::kContained, "contained"},
    {FaultClass::kGpu, "gpu"},
    {FaultClass::kNvlink, "nvlink"},
    {FaultClass::kTrend, "trend"},
    {FaultClass::kIgnore, "ignore"},
}};

constexpr std::array<std::pair<RecoveryStep, const char*>, 7> kRecoveryStepNames{{
    {RecoveryStep::kHealthy, "healthy"},
    {RecoveryStep::kDraining, "draining"},
    {RecoveryStep::kResetting, "resetting"},
    {RecoveryStep::kVerifying, "verifying"},
    {RecoveryStep::kSelfTest, "self-test"},
    {RecoveryStep::kFirmware, "firmware"},
    {RecoveryStep::kOut, "out"},
}};

}  // namespace

const char* FaultClassName(FaultClass fault_class) {
  for (const auto& [value, name] : kFaultClassNames)
    if (value == fault_class) return name;
  return "unknown";
}

Result<FaultClass> ParseFaultClass(std::string_view name) {
  for (const auto& [value, known] : kFaultClassNames)
    if (name == known) return value;
  return InvalidArgument(
      "fault class must be application, contained, gpu, nvlink, trend or ignore");
}

const char* ReachName(Reach reach) {
  switch (reach) {
    case Reach::kNothing:
      return "nothing";
    case Reach::kInstance:
      return "instance";
    case Reach::kGpu:
      return "gpu";
  }
  return "unknown";
}

const char* RecoveryStepName(RecoveryStep step) {
  for (const auto& [value, name] : kRecoveryStepNames)
    if (value == step) return name;
  return "unknown";
}

Result<RecoveryStep> ParseRecoveryStep(std::string_view name) {
  for (const auto& [value, known] : kRecoveryStepNames)
    if (name == known) return value;
  return InvalidArgument(
      "recovery step must be healthy, draining, resetting, verifying, self-test, firmware or out");
}

}  // namespace tessera::health

// The recovery steps of one GPU as pure transitions: faults move a GPU out, each step's outcome
// moves it on, and bounded retries keep a broken GPU from being reset in a loop.
#include <algorithm>

#include "health/health.h"

namespace tessera::health {
namespace {

bool TookOut(const FaultEntry& entry) {
  return entry.action == "stop-gpu" || entry.action == "stop-instance" || entry.action == "drain" ||
         entry.action == "out";
}

void MoveTo(GpuHealth& health, RecoveryStep step, int64_t now_ms) {
  health.step = step;
  health.step_since_ms = now_ms;
}

void Keep(GpuHealth& health, FaultEntry entry) {
  health.history.push_back(std::move(entry));
  if (health.history.size() > kMaxHistory) {
    health.history.erase(health.history.begin(),
                         health.history.end() - static_cast<std::ptrdiff_t>(kMaxHistory));
  }
}

bool Recovering(RecoveryStep step) {
  return step != RecoveryStep::kHealthy && step != RecoveryStep::kOut;
}

}  // namespace

void RecordFault(GpuHealth& health, const Signal& signal, const Decision& decision,
                 const RecoveryPolicy& policy, int64_t now_ms) {
  if (decision.fault_class == FaultClass::kIgnore && !decision.takes_gpu_out) return;
  Keep(health, FaultEntry{signal.at_ms ? signal.at_ms : now_ms, SignalKindName(signal.kind),
                          signal.kind == SignalKind::kXid ? signal.xid : 0,
                          FaultClassName(decision.fault_class), decision.action, decision.reason});
  if (!decision.takes_gpu_out || health.step == RecoveryStep::kOut) return;
  if (Recovering(health.step)) {
    // A fault while it recovers: that attempt failed; start again from draining.
    ++health.attempts;
    health.reason = decision.reason;
    if (!decision.reset_allowed || health.attempts >= policy.max_attempts) {
      health.reason += "; recovery gave up after " + std::to_string(health.attempts) + " attempts";
      MoveTo(health, RecoveryStep::kOut, now_ms);
    } else {
      MoveTo(health, RecoveryStep::kDraining, now_ms);
    }
    return;
  }
  const int64_t since = now_ms - policy.fault_window.count();
  auto recent = std::count_if(health.history.begin(), health.history.end(),
                              [&](const FaultEntry& e) { return TookOut(e) && e.at_ms >= since; });
  health.reason = decision.reason;
  health.attempts = 0;
  health.faulted_ms = now_ms;
  if (recent >= policy.max_faults) {
    health.reason += "; " + std::to_string(recent) + " faults within the window: stays out";
    MoveTo(health, RecoveryStep::kOut, now_ms);
  } else if (!decision.reset_allowed) {
    health.reason += "; no reset can repair it: stays out";
    MoveTo(health, RecoveryStep::kOut, now_ms);
  } else {
    MoveTo(health, RecoveryStep::kDraining, now_ms);
  }
}

void Advance(GpuHealth& health, bool passed, const std::string& detail,
             const RecoveryPolicy& policy, int64_t now_ms, bool retry) {
  if (!Recovering(health.step)) return;
  if (!passed) {
    ++health.attempts;
    health.reason = detail;
    if (!retry || health.attempts >= policy.max_attempts) {
      health.reason +=
          retry ? "; recovery gave up after " + std::to_string(health.attempts) + " attempts"
                : "; no reset can repair it: stays out";
      MoveTo(health, RecoveryStep::kOut, now_ms);
    } else {
      MoveTo(health, RecoveryStep::kResetting, now_ms);
    }
    return;
  }
  switch (health.step) {
    case RecoveryStep::kDraining:
      MoveTo(health, RecoveryStep::kResetting, now_ms);
      return;
    case RecoveryStep::kResetting:
      MoveTo(health, RecoveryStep::kVerifying, now_ms);
      return;
    case RecoveryStep::kVerifying:
      MoveTo(health, RecoveryStep::kSelfTest, now_ms);
      return;
    case RecoveryStep::kSelfTest:
      if (policy.firmware_step) {
        MoveTo(health, RecoveryStep::kFirmware, now_ms);
        return;
      }
      break;
    case RecoveryStep::kFirmware:
      break;
    case RecoveryStep::kHealthy:
    case RecoveryStep::kOut:
      return;
  }
  Release(health, now_ms);
}

void Release(GpuHealth& health, int64_t now_ms) {
  health.reason.clear();
  health.attempts = 0;
  health.faulted_ms = 0;
  MoveTo(health, RecoveryStep::kHealthy, now_ms);
}

}  // namespace tessera::health

// From a signal to a decision: what the fault is (the table, or the signal itself when it is not
// a Xid), whose work it stops, and whether the GPU leaves the pool. The driver's recovery action
// wins where the driver reports one: the Xid says what happened, the action what to do.
#include <algorithm>
#include <set>

#include "common/untrusted_text.h"
#include "health/health.h"

namespace tessera::health {
namespace {

// What a signal that is not a Xid means, in the table's terms.
XidRule RuleOfSignal(const Signal& signal, const XidTable& table) {
  switch (signal.kind) {
    case SignalKind::kXid:
      return table.Find(signal.xid);
    case SignalKind::kDoubleBitEcc:
      return {0, "double-bit ECC error", FaultClass::kGpu, true};
    case SignalKind::kGpuLost:
      return {0, "GPU is lost", FaultClass::kGpu, true};
    case SignalKind::kRemapPending:
      return {0, "row remap pending a reset", FaultClass::kGpu, true};
    case SignalKind::kRemapFailure:
      return {0, "row remap failure", FaultClass::kGpu, false};
    case SignalKind::kRetiredPagesPending:
      return {0, "retired pages pending a reset", FaultClass::kGpu, true};
    case SignalKind::kUncorrectedEcc:
      return {0, "uncorrectable ECC errors (" + std::to_string(signal.count) + ")",
              FaultClass::kGpu, true};
    case SignalKind::kRecoveryAction:
      return {0, "recovery action", FaultClass::kIgnore, true};
    case SignalKind::kAerFatal:
      return {0, "PCIe AER fatal error", FaultClass::kGpu, true};
    case SignalKind::kConfigAllOnes:
      return {0, "config space reads all ones", FaultClass::kGpu, true};
    case SignalKind::kDeviceGone:
      return {0, "device gone from the bus", FaultClass::kGpu, true};
    case SignalKind::kFabricFatal:
      return {0, "fabric fatal error", FaultClass::kGpu, true};
  }
  return {0, "unknown signal", FaultClass::kIgnore, true};
}

std::string Subject(const Signal& signal, const XidRule& rule) {
  std::string what = signal.kind == SignalKind::kXid
                         ? "Xid " + std::to_string(signal.xid) + " (" + rule.name + ")"
                         : rule.name;
  if (signal.kind == SignalKind::kFabricFatal && !signal.detail.empty()) {
    what += " (" + Excerpt(signal.detail, 80) + ")";
  }
  return what;
}

// The class's reach and action, before the recovery action has its say.
void ApplyClass(Decision& decision, FaultClass fault_class, bool reset, const Signal& signal) {
  decision.fault_class = fault_class;
  decision.reset_allowed = reset;
  switch (fault_class) {
    case FaultClass::kApplication:
      decision.action = "notify";
      break;
    case FaultClass::kContained:
      decision.reach = Reach::kInstance;
      decision.gpu_instance_id = signal.gpu_instance_id;
      decision.takes_gpu_out = true;  // drained, then reset to apply the remap
      decision.action = "stop-instance";
      break;
    case FaultClass::kGpu:
    case FaultClass::kNvlink:
      decision.reach = Reach::kGpu;
      decision.takes_gpu_out = true;
      decision.action = "stop-gpu";
      break;
    case FaultClass::kTrend:
      decision.action = "trend";
      break;
    case FaultClass::kIgnore:
      decision.action = "log";
      break;
  }
}

// The driver's recovery action overrides the class (NONE leaves it as it is).
void ApplyRecoveryAction(Decision& decision, RecoveryAction action) {
  switch (action) {
    case RecoveryAction::kNone:
      return;
    case RecoveryAction::kGpuReset:
      if (decision.reach != Reach::kGpu) ApplyClass(decision, FaultClass::kGpu, true, {});
      decision.reset_allowed = true;
      break;
    case RecoveryAction::kNodeReboot:
      if (decision.reach != Reach::kGpu) ApplyClass(decision, FaultClass::kGpu, false, {});
      decision.reset_allowed = false;
      break;
    case RecoveryAction::kDrainP2p:
      // Peer traffic is quiesced by stopping nothing new; the action is read again and turns
      // into one of the others.
      if (!decision.takes_gpu_out) decision.action = "trend";
      return;
    case RecoveryAction::kDrainAndReset:
      // Running work is safe: no new work, reset once it has drained.
      if (!decision.takes_gpu_out) {
        decision.fault_class = FaultClass::kGpu;
        decision.reach = Reach::kNothing;
        decision.takes_gpu_out = true;
        decision.action = "drain";
      }
      decision.reset_allowed = true;
      break;
  }
  decision.reason += std::string("; the driver asks for ") + RecoveryActionName(action);
}

}  // namespace

Classifier::Classifier(XidTable table, ClassifierOptions options)
    : table_(std::move(table)), options_(options) {}

Decision Classifier::Classify(const Signal& signal, const std::vector<std::string>& tenancies) {
  XidRule rule = RuleOfSignal(signal, table_);
  Decision decision;
  const std::string gpu = Excerpt(signal.gpu, 40);
  decision.reason = "gpu-fault: " + Subject(signal, rule) + " on " + gpu;
  ApplyClass(decision, rule.fault_class, rule.reset, signal);
  if (signal.kind == SignalKind::kRecoveryAction) {
    decision.reason =
        "gpu-fault: recovery action " +
        std::string(RecoveryActionName(signal.recovery_action.value_or(RecoveryAction::kNone))) +
        " on " + gpu;
    decision.action = "log";
  }
  if (rule.fault_class == FaultClass::kApplication && !tenancies.empty()) {
    // The same GPU failing the applications of several tenancies points at the GPU.
    auto& recent = recent_[signal.gpu];
    for (const auto& tenancy : tenancies)
      recent.emplace_back(signal.at_ms, tenancy);
    const int64_t window = options_.application_window.count();
    while (!recent.empty() && recent.front().first < signal.at_ms - window)
      recent.pop_front();
    while (recent.size() > 1024)
      recent.pop_front();
    std::set<std::string> distinct;
    for (const auto& entry : recent)
      distinct.insert(entry.second);
    if (static_cast<int>(distinct.size()) >= options_.application_tenancies) {
      ApplyClass(decision, FaultClass::kGpu, true, signal);
      decision.reason +=
          "; application faults from " + std::to_string(distinct.size()) + " tenancies on this GPU";
      recent.clear();
    }
  }
  if (signal.recovery_action) ApplyRecoveryAction(decision, *signal.recovery_action);
  if (decision.takes_gpu_out && !decision.reset_allowed) decision.action = "out";
  return decision;
}

}  // namespace tessera::health

// GPU faults on a DRA node: classification into recovery records, the taints they imply, and the
// recovery steps driven through the hooks.
#include "dra/faults.h"

#include <cctype>
#include <optional>

namespace tessera::dra {

TaintEffect EffectOf(const health::Decision& decision) {
  bool stopped =
      decision.reach == health::Reach::kGpu || decision.reach == health::Reach::kInstance;
  return stopped ? TaintEffect::kNoExecute : TaintEffect::kNoSchedule;
}

std::string TaintValue(const health::Signal& signal) {
  std::string value = signal.kind == health::SignalKind::kXid
                          ? "xid-" + std::to_string(signal.xid)
                          : std::string(health::SignalKindName(signal.kind));
  // A label value: at most 63 of [A-Za-z0-9._-], alphanumeric at both ends.
  for (char& c : value) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) c = '-';
  }
  if (value.size() > 63) value.resize(63);
  while (!value.empty() && !std::isalnum(static_cast<unsigned char>(value.back())))
    value.pop_back();
  while (!value.empty() && !std::isalnum(static_cast<unsigned char>(value.front())))
    value.erase(value.begin());
  return value.empty() ? "fault" : value;
}

FaultHandler::FaultHandler(health::XidTable table, FaultOptions options, RecoveryHooks hooks)
    : options_(std::move(options)), hooks_(std::move(hooks)), classifier_(std::move(table)) {}

void FaultHandler::Restore(const FaultState& state) {
  std::lock_guard lock(mu_);
  for (const auto& [pci, record] : state) {
    Gpu& gpu = gpus_[pci];
    gpu.health = record.health;
    gpu.fault = record.taint;
    ++gpu.changes;
  }
}

FaultState FaultHandler::SnapshotLocked() const {
  FaultState state;
  for (const auto& [pci, gpu] : gpus_)
    state[pci] = FaultRecord{gpu.health, gpu.fault};
  return state;
}

health::Decision FaultHandler::OnSignal(const health::Signal& signal, int64_t now_ms) {
  // The claims first: the driver's lock is not taken under ours.
  std::vector<std::string> holders;
  if (hooks_.claims_holding) holders = hooks_.claims_holding(signal.gpu);
  std::lock_guard lock(mu_);
  health::Decision decision = classifier_.Classify(signal, holders);
  Gpu& gpu = gpus_[signal.gpu];
  const bool was_in_service = gpu.health.in_service();
  health::RecordFault(gpu.health, signal, decision, options_.policy, now_ms);
  if (!decision.takes_gpu_out || gpu.health.in_service()) {
    if (decision.fault_class != health::FaultClass::kIgnore && hooks_.persist)
      (void)hooks_.persist(SnapshotLocked());  // history only; the hook logs a failure
    return decision;
  }
  ++gpu.changes;
  std::optional<uint32_t> instance;
  if (decision.reach == health::Reach::kInstance && decision.gpu_instance_id != health::kWholeGpu)
    instance = decision.gpu_instance_id;
  TaintEffect effect = EffectOf(decision);
  if (was_in_service) {
    gpu.fault = DeviceFault{TaintValue(signal), effect, now_ms / 1000, instance, decision.reason};
  } else {
    // A further fault while it is out widens the taint: NoExecute wins, and a second instance
    // (or the whole GPU) taints every device of the GPU.
    if (effect == TaintEffect::kNoExecute) gpu.fault.effect = effect;
    if (gpu.fault.gpu_instance_id != instance) gpu.fault.gpu_instance_id.reset();
  }
  // Before the lock goes, so before Faults() shows the taint. A failed write keeps the taint in
  // memory all the same (the hook logs it): out of service is the safe side.
  if (hooks_.persist) (void)hooks_.persist(SnapshotLocked());
  return decision;
}

FaultHandler::Outcome FaultHandler::ResetStep(const std::string& pci) {
  if (!hooks_.reset) return {false, "no reset command", false};
  if (hooks_.suspend) hooks_.suspend();
  Status reset = hooks_.reset(pci);
  if (hooks_.resume) hooks_.resume();
  if (!reset) return {false, "reset: " + reset.error().message, true};
  return {true, "reset", true};
}

FaultHandler::Outcome FaultHandler::VerifyStep(const std::string& pci) {
  health::GpuState state = hooks_.read_state ? hooks_.read_state(pci) : health::GpuState{};
  if (auto unfit = health::JudgeState(state)) return {false, unfit->reason, unfit->reset_helps};
  return {true, "verified", true};
}

std::optional<FaultHandler::Outcome> FaultHandler::RunStep(const std::string& pci,
                                                           health::RecoveryStep step) {
  using health::RecoveryStep;
  if (!options_.recover) return std::nullopt;
  switch (step) {
    case RecoveryStep::kDraining: {
      // Empty: no prepared claim holds the GPU and no process runs on it (unknown counts as none
      // where the claims say nobody holds it: a GPU that fell off the bus answers nothing).
      if (hooks_.claims_holding && !hooks_.claims_holding(pci).empty()) return std::nullopt;
      health::GpuState state = hooks_.read_state ? hooks_.read_state(pci) : health::GpuState{};
      if (state.processes && *state.processes > 0) return std::nullopt;
      return Outcome{true, "drained", true};
    }
    case RecoveryStep::kResetting:
      return ResetStep(pci);
    case RecoveryStep::kVerifying:
      return VerifyStep(pci);
    case RecoveryStep::kSelfTest: {
      if (!hooks_.self_test) return Outcome{true, "no self-test", true};
      health::SelfTestVerdict verdict = hooks_.self_test(pci);
      return Outcome{verdict.passed, verdict.passed ? "self-test passed" : verdict.reason, true};
    }
    case RecoveryStep::kFirmware:  // serve's step; DRA nodes have no firmware check
      return Outcome{true, "no firmware check", true};
    default:
      return std::nullopt;
  }
}

bool FaultHandler::Recover(int64_t now_ms) {
  struct Pending {
    std::string pci;
    health::RecoveryStep step;
    uint64_t changes;
  };
  std::vector<Pending> pending;
  {
    std::lock_guard lock(mu_);
    for (const auto& [pci, gpu] : gpus_) {
      if (!gpu.health.in_service() && gpu.health.step != health::RecoveryStep::kOut)
        pending.push_back({pci, gpu.health.step, gpu.changes});
    }
  }
  bool changed = false;
  for (const auto& item : pending) {
    auto outcome = RunStep(item.pci, item.step);
    if (!outcome) continue;
    std::lock_guard lock(mu_);
    Gpu& gpu = gpus_[item.pci];
    // A fault during the step restarted its recovery: this outcome is stale.
    if (gpu.changes != item.changes || gpu.health.step != item.step) continue;
    health::GpuHealth before = gpu.health;
    health::Advance(gpu.health, outcome->passed, outcome->detail, options_.policy, now_ms,
                    outcome->reset_helps);
    // Untainted only once the file says so; a failed write keeps it at this step, to run again.
    if (hooks_.persist && !hooks_.persist(SnapshotLocked()) && gpu.health.in_service()) {
      gpu.health = std::move(before);
      continue;
    }
    changed = true;
  }
  return changed;
}

std::map<std::string, DeviceFault> FaultHandler::Faults() const {
  std::lock_guard lock(mu_);
  std::map<std::string, DeviceFault> out;
  for (const auto& [pci, gpu] : gpus_) {
    if (gpu.health.in_service()) continue;
    DeviceFault fault = gpu.fault;
    if (!gpu.health.reason.empty()) fault.reason = gpu.health.reason;
    out[pci] = std::move(fault);
  }
  return out;
}

std::map<std::string, health::GpuHealth> FaultHandler::Records() const {
  std::lock_guard lock(mu_);
  std::map<std::string, health::GpuHealth> out;
  for (const auto& [pci, gpu] : gpus_)
    out[pci] = gpu.health;
  return out;
}

}  // namespace tessera::dra

// An operator's Xid classification table (--fault-table, docs/faults.md) as the health module
// loads it: parsed on its own and over the built-in table (XidTable::Load's path), then a
// Classifier over it decides a few signals, and their decisions reach a GPU's health record.
// Checked: the table stays sorted with one rule per Xid, every listed Xid is found as listed,
// and every decision is one the recovery can act on.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "health/health.h"

namespace {

using namespace tessera::health;

void CheckTable(const XidTable& table) {
  uint64_t previous = 0;
  for (const auto& rule : table.rules()) {
    if (rule.xid == 0 || rule.xid <= previous) __builtin_trap();
    if (rule.name.empty() || rule.name.size() > 120) __builtin_trap();
    const XidRule found = table.Find(rule.xid);
    if (found.fault_class != rule.fault_class || found.reset != rule.reset) __builtin_trap();
    previous = rule.xid;
  }
  if (table.rules().size() > 4096) __builtin_trap();
}

void CheckDecision(const Decision& decision) {
  if (decision.reason.empty() || decision.reason.size() > 1024) __builtin_trap();
  if (decision.action.empty()) __builtin_trap();
  if (decision.takes_gpu_out && !decision.reset_allowed && decision.action != "out")
    __builtin_trap();
}

// Signals a GPU may raise: every Xid the table lists (up to a few), one it may not, the
// application faults of three tenancies, and the driver's recovery actions.
std::vector<Signal> SignalsFor(const XidTable& table, const uint8_t* data, size_t size) {
  std::vector<Signal> signals;
  const std::string gpu = "0000:9d:00.0";
  int64_t at_ms = 1700000000000;
  for (size_t i = 0; i < table.rules().size() && i < 8; ++i) {
    Signal signal;
    signal.gpu = gpu;
    signal.xid = table.rules()[i].xid;
    signal.at_ms = at_ms += 1000;
    signal.gpu_instance_id = i % 2 ? 1 : kWholeGpu;
    signals.push_back(signal);
  }
  Signal unknown;
  unknown.gpu = gpu;
  unknown.xid = size ? data[size - 1] * 7 + 1 : 1;
  unknown.at_ms = at_ms += 1000;
  signals.push_back(unknown);
  for (uint32_t action = 0; action <= 4; ++action) {
    Signal signal = unknown;
    signal.recovery_action = static_cast<RecoveryAction>(action);
    signal.at_ms = at_ms += 1000;
    signals.push_back(signal);
  }
  Signal lost;
  lost.kind = SignalKind::kGpuLost;
  lost.gpu = gpu;
  lost.at_ms = at_ms += 1000;
  signals.push_back(lost);
  return signals;
}

void Exercise(const XidTable& table, const uint8_t* data, size_t size) {
  CheckTable(table);
  Classifier classifier(table);
  GpuHealth health;
  RecoveryPolicy policy;
  int64_t now_ms = 1700000000000;
  const std::vector<std::string> tenancies[] = {{"alpha"}, {"beta"}, {"gamma"}};
  size_t n = 0;
  for (const Signal& signal : SignalsFor(table, data, size)) {
    const Decision decision = classifier.Classify(signal, tenancies[n++ % 3]);
    CheckDecision(decision);
    RecordFault(health, signal, decision, policy, now_ms += 1000);
    if (health.history.size() > kMaxHistory) __builtin_trap();
    if (decision.takes_gpu_out && health.in_service()) __builtin_trap();
    if (!health.in_service() && health.step != RecoveryStep::kOut) {
      now_ms += 1000;
      Advance(health, (n & 1) != 0, "fuzz", policy, now_ms);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto alone = XidTable::Parse(text)) Exercise(*alone, data, size);
  if (auto over = XidTable::Parse(text, &XidTable::Default())) {
    if (over->rules().size() < XidTable::Default().rules().size()) __builtin_trap();
    Exercise(*over, data, size);
  }
  return 0;
}

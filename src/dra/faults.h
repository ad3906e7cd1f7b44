// GPU faults on a DRA node: the health monitor's signals go through the classifier into each GPU's
// recovery record (health::GpuHealth), and the records say which devices carry the
// gpu.tessera.dev/fault taint. Recovery runs the steps of health.h on the caller's thread: once
// no prepared claim holds the GPU and it runs no process, suspend the monitor, reset, resume,
// verify the NVML state, run the self-test; a GPU back in service loses its taint. The reads and
// commands come in as hooks (health/watch in the plugin, stand-ins in tests).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common/error.h"
#include "dra/dra.h"
#include "dra/fault_state.h"
#include "health/health.h"

namespace tessera::dra {

struct RecoveryHooks {
  // The GPU's NVML state now.
  std::function<health::GpuState(const std::string& pci_address)> read_state;
  // Around the reset: the monitor lets go of NVML so that the reset is not refused.
  std::function<void()> suspend;
  std::function<void()> resume;
  std::function<Status(const std::string& pci_address)> reset;
  // Empty: no active self-test (verification by NVML state only).
  std::function<health::SelfTestVerdict(const std::string& pci_address)> self_test;
  // UIDs of the prepared claims holding a device of the GPU.
  std::function<std::vector<std::string>(const std::string& pci_address)> claims_holding;
  // Makes the records durable (the fault state file); called under the handler's lock, so a
  // taint is written before Faults() shows it. A GPU is back in service (untainted) only once
  // this succeeded; empty: the records live in memory.
  std::function<Status(const FaultState& state)> persist;
};

struct FaultOptions {
  health::RecoveryPolicy policy;
  // false: faults are detected and tainted, but the GPU is not reset here (the taint stays until
  // the plugin restarts); the node agent recovers the GPUs of its node.
  bool recover = true;
};

// The effect of a decision's taint: NoExecute where the fault stopped the GPU's work (reach GPU
// or instance), NoSchedule where the running work is safe (a drain).
TaintEffect EffectOf(const health::Decision& decision);
// The taint's value for a signal, a label value: "xid-79", "gpu-lost", "recovery-action".
std::string TaintValue(const health::Signal& signal);

// Thread-safe: signals arrive on the monitor's thread, Recover runs on another.
class FaultHandler {
 public:
  FaultHandler(health::XidTable table, FaultOptions options, RecoveryHooks hooks);

  // The records of an earlier run (the fault state file), before any signal: a GPU out of
  // service keeps its taint, and one between draining and the self-test resumes its recovery.
  void Restore(const FaultState& state);

  // Classifies the signal and records it on its GPU; returns the decision.
  health::Decision OnSignal(const health::Signal& signal, int64_t now_ms);
  // One pass over the faulted GPUs: each GPU whose step can go on goes one step (the reset and
  // self-test run here, without the lock). Returns whether any record changed.
  bool Recover(int64_t now_ms);
  // Follows the node agent that recovers this node's GPUs (recover off): a tainted GPU it
  // publishes healthy since after the fault loses its taint (once persisted), and a fault it
  // publishes on a GPU in service here taints it. Returns whether any record changed.
  bool Follow(const std::map<std::string, health::GpuHealth>& published, int64_t now_ms);
  // The faults that taint devices now, by PCI address (what DeviceState::faults carries).
  std::map<std::string, DeviceFault> Faults() const;
  // Every GPU's record that saw a fault, by PCI address.
  std::map<std::string, health::GpuHealth> Records() const;

 private:
  struct Gpu {
    health::GpuHealth health;
    DeviceFault fault;     // the taint while the GPU is out of service
    uint64_t changes = 0;  // grows with every fault, so a step that ran meanwhile is dropped
  };
  // Runs the I/O of `step` for the GPU (no lock held); nullopt when it cannot go on yet.
  struct Outcome {
    bool passed = false;
    std::string detail;
    bool reset_helps = true;
  };
  FaultState SnapshotLocked() const;
  bool FollowHealthyLocked(Gpu& gpu, const health::GpuHealth& published, int64_t now_ms);
  bool FollowFaultLocked(const std::string& pci, const health::GpuHealth& published);
  std::optional<Outcome> RunStep(const std::string& pci, health::RecoveryStep step);
  Outcome ResetStep(const std::string& pci);
  Outcome VerifyStep(const std::string& pci);

  const FaultOptions options_;
  const RecoveryHooks hooks_;
  mutable std::mutex mu_;
  health::Classifier classifier_;
  std::map<std::string, Gpu> gpus_;  // by PCI address
};

}  // namespace tessera::dra

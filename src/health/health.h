// GPU health: what a GPU fault is, what it touches, and how a faulted GPU comes back.
//
// One module for every path that hands out GPUs (tessera serve, the node agent, the device plugin,
// the DRA plugin). This module is pure (classify.cc, xid_table.cc, recovery_plan.cc,
// verdicts.cc): a Signal (what was observed) goes through the Classifier to a Decision (what it
// touches), and a GpuHealth record moves through the recovery steps as each step's outcome comes
// in. The reads and the commands are in health/watch (NVML events, NVML state, sysfs where no
// driver is loaded; the reset and self-test commands). Facts behind the table and the steps:
// docs/faults.md.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace tessera::health {

// ---- What was observed ----

enum class SignalKind {
  kXid,                  // an NVML Xid event (critical Xid), `xid` set
  kDoubleBitEcc,         // an NVML double-bit ECC event
  kGpuLost,              // a call answered NVML_ERROR_GPU_IS_LOST
  kRemapPending,         // remapped rows: a remap waits for a reset
  kRemapFailure,         // remapped rows: the GPU cannot repair itself
  kRetiredPagesPending,  // pre-Ampere page retirement waits for a reset
  kUncorrectedEcc,       // the volatile uncorrected ECC count grew (`count`: the new count)
  kRecoveryAction,       // the driver's recovery action (field 230) changed: `recovery_action`
  kAerFatal,             // sysfs: the PCIe AER fatal counter grew (no driver loaded)
  kConfigAllOnes,        // sysfs: the config space reads all ones (no driver loaded)
  kDeviceGone,           // sysfs: the device's directory vanished
  kFabricFatal,          // the fabric manager or an NVSwitch reported a fatal error
};
const char* SignalKindName(SignalKind kind);  // "xid", "double-bit-ecc", "gpu-lost", ...

// The driver's recovery action (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, field 230).
enum class RecoveryAction : uint32_t {
  kNone = 0,
  kGpuReset = 1,
  kNodeReboot = 2,
  kDrainP2p = 3,
  kDrainAndReset = 4,
};
const char* RecoveryActionName(RecoveryAction action);  // "none", "gpu-reset", "node-reboot", ...

inline constexpr uint32_t kWholeGpu = 0xFFFFFFFF;  // no MIG instance named

struct Signal {
  SignalKind kind = SignalKind::kXid;
  std::string gpu;  // PCI address, sysfs form ("0000:9d:00.0")
  uint64_t xid = 0;
  // MIG: the GPU and compute instance the event names (kWholeGpu: none).
  uint32_t gpu_instance_id = kWholeGpu;
  uint32_t compute_instance_id = kWholeGpu;
  // The recovery action read with the event (or the new one for kRecoveryAction): where the
  // driver has the field, it decides what to do.
  std::optional<RecoveryAction> recovery_action;
  uint64_t count = 0;  // kUncorrectedEcc: the count now; kAerFatal: the counter now
  int64_t at_ms = 0;   // when it was observed (milliseconds since the epoch)
  std::string detail;  // bounded, printable: e.g. the partition of a fabric error
};

// NVML's state of one GPU, read after an event and before the GPU returns to service. A field
// the board or driver does not have is nullopt.
struct GpuState {
  bool lost = false;  // a read answered GPU_IS_LOST
  std::optional<bool> remap_pending;
  std::optional<bool> remap_failure;
  std::optional<bool> retired_pages_pending;
  std::optional<uint64_t> uncorrected_volatile_ecc;
  std::optional<RecoveryAction> recovery_action;
  // The processes on the GPU now (nullopt: could not be read): a reset waits for none.
  std::optional<uint32_t> processes;
};

// ---- The classification table (data/xid-table.yaml by default; docs/faults.md) ----

enum class FaultClass {
  kApplication,  // the application's own fault: tell its tenant, touch no GPU
  kContained,    // uncorrectable but contained to one context (or MIG instance)
  kGpu,          // the GPU: stop everything on it, reset
  kNvlink,       // the GPU and its NVLink peers: stop its work, name the peers, reset
  kTrend,        // count it, stop nothing
  kIgnore,       // log only
};
const char* FaultClassName(FaultClass fault_class);  // "application", "contained", ...
Result<FaultClass> ParseFaultClass(std::string_view name);

struct XidRule {
  uint64_t xid = 0;
  std::string name;  // "GPU has fallen off the bus"
  FaultClass fault_class = FaultClass::kIgnore;
  bool reset = true;  // false: the GPU stays out until an operator acts (e.g. 64)
};

class XidTable {
 public:
  // The built-in table (data/xid-table.yaml, compiled in).
  static const XidTable& Default();
  // A table file's text: `xids: [{xid, name, class, reset?}]` and an optional
  // `default: {class}` for Xids it does not list. With `base`, the file's entries replace the
  // base's of the same Xid (an operator's override). InvalidArgument naming the entry and field
  // for anything malformed; bounded (at most 4096 entries, names of 120 printable bytes).
  static Result<XidTable> Parse(std::string_view yaml, const XidTable* base = nullptr);
  // Default() with the operator's file over it; the file is read bounded (1 MiB, regular file).
  static Result<XidTable> Load(const std::string& override_path);

  // The rule of `xid`; Xids not listed get the default class under the name "unknown Xid".
  XidRule Find(uint64_t xid) const;
  const std::vector<XidRule>& rules() const { return rules_; }  // by Xid

 private:
  std::vector<XidRule> rules_;
  FaultClass unknown_ = FaultClass::kTrend;
};

// ---- Decisions ----

// Whose work a fault stops.
enum class Reach {
  kNothing,   // nobody's work stops
  kInstance,  // the containers of the MIG instance (or, without one, of the context's holder)
  kGpu,       // every container on the GPU
};
const char* ReachName(Reach reach);

struct Decision {
  FaultClass fault_class = FaultClass::kIgnore;
  Reach reach = Reach::kNothing;
  bool takes_gpu_out = false;  // the GPU leaves the pool and goes through recovery
  bool reset_allowed = true;   // false: it stays out until an operator acts
  // The metrics label: "log", "trend", "notify" (an application fault told to its tenant),
  // "stop-instance", "stop-gpu", "drain" (no new work; the running work is safe), "out".
  std::string action;
  // The stop reason of the containers it stops (or the note an application fault leaves):
  // "gpu-fault: Xid 79 (GPU has fallen off the bus) on 0000:9d:00.0".
  std::string reason;
  uint32_t gpu_instance_id = kWholeGpu;  // kInstance: which instance
};

struct ClassifierOptions {
  // Application faults from this many tenancies on one GPU within the window point at the GPU.
  int application_tenancies = 3;
  std::chrono::milliseconds application_window = std::chrono::hours(1);
};

// Not thread-safe: one owner (it remembers recent application faults per GPU).
class Classifier {
 public:
  explicit Classifier(XidTable table, ClassifierOptions options = {});
  // `tenancies`: the tenancies whose containers hold the GPU (or the instance the signal names)
  // at the signal's time; application faults are counted by them.
  Decision Classify(const Signal& signal, const std::vector<std::string>& tenancies);
  const XidTable& table() const { return table_; }

 private:
  XidTable table_;
  ClassifierOptions options_;
  // By GPU: recent application faults (time, tenancy), oldest first.
  std::map<std::string, std::deque<std::pair<int64_t, std::string>>> recent_;
};

// What GPU state says before a GPU returns to service: nullopt when it is fit, else why not and
// whether a reset can still help (remap failure and NODE_REBOOT cannot).
struct Unfit {
  std::string reason;
  bool reset_helps = true;
};
std::optional<Unfit> JudgeState(const GpuState& state);

// A self-test command's verdict from its exit status and output: `dcgmi diag` output is read
// (every "Fail" fails; a run whose tests all say "Skip" or "Not Run" is no pass); any other
// program passes on exit 0.
struct SelfTestVerdict {
  bool passed = false;
  std::string reason;  // bounded excerpt
};
SelfTestVerdict JudgeSelfTest(int exit_code, std::string_view output, bool dcgm_diag);

// ---- Recovery (pure steps; every path drives them and keeps the record durable) ----

enum class RecoveryStep {
  kHealthy,    // in service
  kDraining,   // faulted: waiting until the GPU holds no container and no process
  kResetting,  // the reset command runs (after the fabric partition is deactivated)
  kVerifying,  // NVML state read: remap not pending, no failure, recovery action none
  kSelfTest,   // the active self-test runs
  kFirmware,   // serve: the firmware check (the lease flow's checker), then free
  kOut,        // stays out until an operator acts (reason says why)
};
const char* RecoveryStepName(RecoveryStep step);  // "healthy", "draining", ...
Result<RecoveryStep> ParseRecoveryStep(std::string_view name);

struct FaultEntry {
  int64_t at_ms = 0;
  std::string signal;  // SignalKindName
  uint64_t xid = 0;    // 0 unless a Xid
  std::string fault_class;
  std::string action;
  std::string reason;
  friend bool operator==(const FaultEntry&, const FaultEntry&) = default;
};

struct GpuHealth {
  RecoveryStep step = RecoveryStep::kHealthy;
  std::string reason;  // the fault that took it out, or why it stays out
  int attempts = 0;    // recovery attempts for the current fault
  int64_t step_since_ms = 0;
  int64_t faulted_ms = 0;           // when the current fault took it out (0: in service)
  std::vector<FaultEntry> history;  // newest last; at most kMaxHistory
  bool in_service() const { return step == RecoveryStep::kHealthy; }
  friend bool operator==(const GpuHealth&, const GpuHealth&) = default;
};
inline constexpr size_t kMaxHistory = 32;

struct RecoveryPolicy {
  int max_attempts = 3;  // failed recovery attempts for one fault before it stays out
  // A GPU taken out this many times within the window stays out.
  int max_faults = 3;
  std::chrono::milliseconds fault_window = std::chrono::hours(24);
  bool firmware_step = false;  // serve: kFirmware after the self-test; others go to kHealthy
};

// A signal's decision reaches the record: every decision but kIgnore is kept in the history;
// one that takes the GPU out moves a healthy GPU to kDraining (or kOut when no reset is
// allowed, or too many faults fell in the window). A fault while it recovers restarts recovery
// from kDraining (counted as a failed attempt); a fault while it is out only adds history.
void RecordFault(GpuHealth& health, const Signal& signal, const Decision& decision,
                 const RecoveryPolicy& policy, int64_t now_ms);

// The outcome of the step in progress (kDraining: "the GPU is empty now"). Passed moves to the
// next step; failed counts an attempt and goes back to kResetting, or to kOut once
// policy.max_attempts failed or `retry` is false (Unfit::reset_helps). `detail` becomes the
// reason of a failure.
void Advance(GpuHealth& health, bool passed, const std::string& detail,
             const RecoveryPolicy& policy, int64_t now_ms, bool retry = true);

// An operator's release: back to kHealthy, attempts cleared, history kept.
void Release(GpuHealth& health, int64_t now_ms);

}  // namespace tessera::health

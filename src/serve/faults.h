// GPU faults as the service acts on them (docs/faults.md): a signal from this host's monitor is
// classified (health::Classifier, with the tenancies that hold the GPU) and contained at once —
// the containers the decision reaches are stopped with its reason and billed to the fault's
// time, the GPU leaves the pool (faulted) — and recorded in the GPU's health. In fleet mode the
// node agents watch and recover their GPUs and publish the health; a GPU whose published health
// leaves healthy is contained the same way, and one that is healthy again is free.
//
// What a fault reaches: Reach::kGpu every holder of the GPU (whole, MIG slices, shares);
// Reach::kInstance the holders of the MIG slices of the GPU instance the signal names (a GPU
// without MIG: its holders); application faults stop nothing, their reason goes into the
// holders' records. A tenancy whose policy asks for it (requeueOnGpuFault) gets each stopped
// request submitted again as a new pending container (the stopped one's reason names it): the
// GPU is out of the pool, so it runs elsewhere. Containers on other GPUs are never touched.
#pragma once

#include <string>
#include <vector>

#include "fleet/fleet.h"
#include "health/health.h"
#include "serve/fault_metrics.h"
#include "serve/model.h"
#include "serve/submissions.h"

namespace tessera::serve {

class Faults {
 public:
  Faults(Model& model, Submissions& submissions, FaultMetrics& metrics);
  Faults(const Faults&) = delete;
  Faults& operator=(const Faults&) = delete;

  // Any thread (the monitor's): classified, recorded and contained under the model's mutex; the
  // stops are handed to the scheduler's pool at once.
  void OnSignal(const health::Signal& signal);
  // Fleet mode, mu held: `published` is the health `gpu`'s node publishes now. The changes go
  // into `out`, requests queued again into `requeued` (commit both with CommitLocked).
  void ApplyPublishedLocked(fleet::GpuRecord& gpu, const health::GpuHealth& published,
                            std::vector<fleet::Mutation>& out, std::vector<std::string>& requeued);
  // mu held: commits `out`; the `requeued` containers join the queue once it has ended.
  void CommitLocked(std::vector<fleet::Mutation> out, std::vector<std::string> requeued);
  // mu held: the firmware check of a GPU in recovery (health step kFirmware, lease checking)
  // ended; it goes free (healthy) or back to recovery (faulted). False when `gpu` is not in
  // recovery: the lease flow decides as usual.
  bool FirmwareCheckedLocked(fleet::GpuRecord& gpu, bool passed, const std::string& reason,
                             std::vector<fleet::Mutation>& out);
  // mu held: an operator's release of a faulted GPU: health back to healthy, history kept,
  // the GPU free. FailedPrecondition while a container still holds it.
  Status ReleaseLocked(fleet::GpuRecord& gpu, std::vector<fleet::Mutation>& out);

  const health::RecoveryPolicy& policy() const { return policy_; }
  // mu held: whether a container that has not ended holds `gpu` (whole, a slice or a share).
  bool HeldLocked(const fleet::GpuRecord& gpu) const;

 private:
  // The containers (not ended) that hold `gpu` and whom `decision` reaches.
  std::vector<fleet::ContainerRecord*> ReachedLocked(const fleet::GpuRecord& gpu,
                                                     const health::Decision& decision);
  // `requeued`: the containers submitted again (they join the queue after the commit).
  void ContainLocked(fleet::GpuRecord& gpu, const health::Decision& decision, int64_t at_ms,
                     std::vector<fleet::Mutation>& out, std::vector<std::string>& requeued);
  // The stopped container's request submitted again when its tenancy's policy asks for it.
  void RequeueLocked(fleet::ContainerRecord& stopped, std::vector<fleet::Mutation>& out,
                     std::vector<std::string>& requeued);

  Model& model_;
  Submissions& submissions_;
  FaultMetrics& metrics_;
  health::RecoveryPolicy policy_;
  health::Classifier classifier_;  // guarded by model_.mu
};

// The tenancy record's extension with its fault policy: {"requeueOnGpuFault": bool}. The API
// sets it from the tenancy's `requeueOnGpuFault`.
inline constexpr std::string_view kFaultPolicyExtension = "faults";
std::string FaultPolicyToJson(bool requeue_on_gpu_fault);
// Strict: a JSON object with at most that field, a boolean.
Result<bool> ParseFaultPolicy(std::string_view json_text);
bool RequeuesOnGpuFault(const fleet::Tenancy& record);

}  // namespace tessera::serve

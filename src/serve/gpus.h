// The GPUs: the fleet's nodes as they publish themselves (fleet mode), whether a request can ever
// fit, the listing tenants and the admin see, and the operator's actions (drain, undrain,
// quarantine, release).
#pragma once

#include <string>
#include <vector>

#include "serve/model.h"
#include "serve/types.h"

namespace tessera::serve {

class Faults;

// Whether one of the caller's containers holds the GPU (whole, a MIG slice or a share); the
// admin holds every GPU. mu held.
bool HoldsGpuLocked(const Model& model, const Caller& caller, const fleet::GpuRecord& gpu);
// A GPU record as `caller` may see it: another tenancy's holder is not named, the firmware
// baseline is the admin's, a GPU the caller does not hold has no UUID (CDI name), and its fault
// history (health) has the names of other tenancies taken out of the reasons. mu held.
void RedactGpuLocked(const Model& model, const Caller& caller, fleet::GpuRecord& gpu);
void RedactHealthLocked(const Model& model, const Caller& caller, health::GpuHealth& health);

class Gpus {
 public:
  explicit Gpus(Model& model) : model_(model) {}
  // Before any thread starts: the fault handling (published health, releasing faulted GPUs).
  void SetFaults(Faults* faults) { faults_ = faults; }

  // Fleet mode: the nodes that publish GPUs now (all of them, each call). New GPUs are added
  // (free); GPUs of nodes no longer listed, or no longer listed by their node, become unavailable
  // (never placed) but keep their records and leases.
  void UpdateNodes(std::vector<NodeInventory> nodes);
  // FailedPrecondition when no host or node could ever hold `gpus` GPUs.
  Status CheckRequest(int gpus) const;
  // FailedPrecondition when this host does not have that many MIG devices of the profile
  // (layouts change only by `tessera mig apply` and a restart); InvalidArgument in fleet mode.
  Status CheckMigRequest(const fleet::MigRequest& mig) const;
  // FailedPrecondition when no GPU here could ever hold `share` (none shareable, or none with
  // that much memory less the reserve); InvalidArgument in fleet mode.
  // A share of a MIG slice: FailedPrecondition when no MIG device here has its profile, or none
  // of them the memory less the reserve.
  Status CheckShareRequest(const sharing::Share& share) const;
  // mu held: whether a GPU that lets new slices in has a free MIG device of `profile` (a MIG
  // request arriving may then start).
  bool MigSlicesFreeLocked(const std::string& profile) const;
  std::vector<fleet::GpuRecord> List(const Caller& caller) const;
  // One GPU as List shows it; NotFound for an ID no GPU has.
  Result<fleet::GpuRecord> Get(const Caller& caller, const std::string& gpu_id) const;
  // `gpu_id` is GpuRecord::id(): the PCI address on this host, "<PCI>@<node>" in fleet mode.
  void Admin(const Caller& caller, const std::string& gpu_id, GpuAction action, std::string reason,
             Done<fleet::GpuRecord> done);

 private:
  Status CheckMigShareRequestLocked(const sharing::Share& share) const;  // mu held
  // Admin's steps, mu held: the action's change of the lease of GPU `gpu_id` (or the refusal to
  // make it).
  Status ApplyActionLocked(const std::string& gpu_id, fleet::GpuRecord& gpu, GpuAction action,
                           const std::string& reason, std::vector<fleet::Mutation>& mutations);
  // A quarantined or draining GPU is free again (its firmware now the baseline); a held one's
  // holders are stopped.
  Status ReleaseLocked(const std::string& gpu_id, fleet::GpuRecord& gpu,
                       std::vector<fleet::Mutation>& mutations);
  void StopHoldersLocked(const fleet::GpuRecord& gpu, std::vector<fleet::Mutation>& mutations);
  // UpdateNodes' step for a GPU already known: what its node publishes now (model, CDI name,
  // index, availability, health).
  void MergePublishedLocked(fleet::GpuRecord& existing, const fleet::GpuRecord& gpu,
                            std::vector<fleet::Mutation>& mutations,
                            std::vector<std::string>& requeued);
  void RebuildFleetLocked();
  Status CheckFleetRequestLocked(int gpus) const;

  Model& model_;
  Faults* faults_ = nullptr;
};

}  // namespace tessera::serve

// The driver's MIG instances (MIG by demand): which instances the checkpoint says are its own,
// the intents written before NVML makes one, making and undoing them at prepare, releasing them at
// unprepare. Driver's other state is in driver.cc.
#include <algorithm>

#include "common/atomic_file.h"
#include "dra/dra.h"

namespace tessera::dra {

void Driver::SetMig(MigHooks hooks) {
  mig_ = std::move(hooks);
}

std::map<std::string, std::set<uint32_t>> Driver::OwnedInstances(const Checkpoint& checkpoint) {
  std::map<std::string, std::set<uint32_t>> owned;
  for (const auto& [uid, claim] : checkpoint) {
    for (const auto& device : claim.devices) {
      if (device.mig_instance)
        owned[device.mig_instance->pci_address].insert(device.mig_instance->gpu_instance_id);
      else if (device.mig_intent && device.mig_intent->gpu_instance_id)
        owned[device.mig_intent->pci_address].insert(*device.mig_intent->gpu_instance_id);
    }
  }
  return owned;
}

std::map<std::string, std::set<uint32_t>> Driver::OwnedByOthers(const std::string& uid) const {
  auto owned = OwnedInstances(checkpoint_);
  for (const auto& [other, claim] : pending_) {
    if (other == uid) continue;
    for (const auto& [pci, ids] : OwnedInstances({{other, claim}}))
      owned[pci].insert(ids.begin(), ids.end());
  }
  return owned;
}

Status Driver::CheckPartitioning(const PreparedClaim& prepared) const {
  for (const auto& wanted : prepared.devices) {
    const NodeDevice* device = node_.Find(wanted.device_name);
    if (!device) continue;
    const bool whole = device->type == "gpu" && !device->counter_set.empty();
    for (const auto& [uid, claim] : checkpoint_) {
      for (const auto& held : claim.devices) {
        const NodeDevice* other = node_.Find(held.device_name);
        if (!other || other->pci_address != device->pci_address) continue;
        if (device->type == "mig" && other->type == "gpu") {
          return FailedPrecondition("GPU " + device->pci_address + " is prepared whole for claim " +
                                    claim.ref.namespace_name + "/" + claim.ref.name +
                                    ": it is not partitioned while that claim holds it");
        }
        if (whole && held.mig_instance) {
          return FailedPrecondition(
              "GPU " + device->pci_address + " holds a MIG instance prepared for claim " +
              claim.ref.namespace_name + "/" + claim.ref.name + ": it is not handed out whole");
        }
      }
    }
  }
  return Ok();
}

Status Driver::WriteIntents(PreparedClaim& prepared) {
  bool any = false;
  for (auto& wanted : prepared.devices) {
    const NodeDevice* device = node_.Find(wanted.device_name);
    if (!device || !device->mig_slot) continue;
    const MigSlot& slot = *device->mig_slot;
    wanted.mig_intent = MigIntent{device->pci_address, slot.profile_id, slot.start, slot.size, {}};
    any = true;
  }
  if (!any || !mig_.create) return Ok();
  const std::string& uid = prepared.ref.uid;
  // An earlier try of this claim left intents (a failure, a restart): one at a place this try does
  // not make again is released first (the claim was allocated anew meanwhile).
  if (auto earlier = pending_.find(uid); earlier != pending_.end()) {
    auto owned = OwnedByOthers(uid);
    for (const auto& old : earlier->second.devices) {
      if (!old.mig_intent) continue;
      bool again = std::any_of(prepared.devices.begin(), prepared.devices.end(), [&](auto& d) {
        return d.mig_intent && d.mig_intent->pci_address == old.mig_intent->pci_address &&
               d.mig_intent->profile_id == old.mig_intent->profile_id &&
               d.mig_intent->start == old.mig_intent->start;
      });
      if (again) continue;
      if (auto released = ReleaseIntent(mig_, *old.mig_intent, owned[old.mig_intent->pci_address]);
          !released) {
        return released.error().WithContext("release the instance of an earlier try");
      }
    }
  }
  PreparedClaim intent = prepared;
  intent.pending = true;
  // The intent is on disk before NVML makes anything (atomically, as every claim file).
  if (auto written = WritePreparedClaim(PreparedDir(), intent, Durability::kProcessCrash);
      !written) {
    return written.error().WithContext("write the claim's MIG intent");
  }
  pending_[uid] = std::move(intent);
  return Ok();
}

Status Driver::MakeInstances(PreparedClaim& prepared) {
  if (auto written = WriteIntents(prepared); !written) return written;
  auto owned = OwnedByOthers(prepared.ref.uid);
  for (auto& wanted : prepared.devices) {
    const NodeDevice* device = node_.Find(wanted.device_name);
    if (!device || !device->mig_slot) continue;
    if (!mig_.create) {
      UndoInstances(prepared);
      return FailedPrecondition("device " + device->name +
                                " is a MIG placement, and MIG instances are not made here");
    }
    auto made = mig_.create(*device, owned[device->pci_address]);
    if (!made) {
      UndoInstances(prepared);
      return made.error().WithContext("make " + device->mig_slot->profile + " at " +
                                      std::to_string(device->mig_slot->start) + " on " +
                                      device->pci_address);
    }
    owned[made->pci_address].insert(made->gpu_instance_id);
    wanted.mig_instance = std::move(*made);
  }
  return Ok();
}

// Undoes MakeInstances after a later step failed: the claim is not prepared, so nothing holds
// them. An instance whose making failed part way may exist at its place: it goes too. The claim's
// intents stay on disk while any may remain, for the next prepare, start or unprepare.
void Driver::UndoInstances(const PreparedClaim& prepared) {
  auto pending = pending_.find(prepared.ref.uid);
  if (pending == pending_.end()) return;
  auto owned = OwnedByOthers(prepared.ref.uid);
  bool gone = true;
  for (const auto& device : prepared.devices) {
    Status undone = Ok();
    if (device.mig_instance && mig_.destroy)
      undone = mig_.destroy(*device.mig_instance);
    else if (device.mig_intent)
      undone = ReleaseIntent(mig_, *device.mig_intent, owned[device.mig_intent->pci_address]);
    gone = gone && undone.ok();
  }
  if (!gone) return;
  if (RemoveFile(PreparedClaimPath(PreparedDir(), prepared.ref.uid), Durability::kProcessCrash))
    pending_.erase(pending);
}

Status Driver::ReleasePending(const ClaimRef& ref) {
  auto it = pending_.find(ref.uid);
  if (it == pending_.end()) return Ok();
  if (!mig_.find || !mig_.destroy) {
    return FailedPrecondition(
        "the claim's MIG instances were being made and are not destroyed "
        "here (--mig-by-demand off); they stay");
  }
  auto owned = OwnedByOthers(ref.uid);
  for (const auto& device : it->second.devices) {
    if (!device.mig_intent) continue;
    const MigIntent& intent = *device.mig_intent;
    if (auto released = ReleaseIntent(mig_, intent, owned[intent.pci_address]); !released) {
      return released.error().WithContext("MIG instance at " + std::to_string(intent.start) +
                                          " on " + intent.pci_address + " (" + device.device_name +
                                          "); it stays, and kubelet retries the unprepare");
    }
  }
  return Ok();
}

Status Driver::DestroyClaimInstances(const ClaimRef& ref) {
  auto it = checkpoint_.find(ref.uid);
  if (it == checkpoint_.end()) return Ok();
  for (const auto& device : it->second.devices) {
    if (!device.mig_instance) continue;
    const MigInstance& instance = *device.mig_instance;
    std::string which = "MIG instance GI " + std::to_string(instance.gpu_instance_id) + " on " +
                        instance.pci_address + " (" + device.device_name + ")";
    if (!mig_.destroy) {
      return FailedPrecondition(which +
                                " was made for this claim and MIG instances are not "
                                "destroyed here (--mig-by-demand off); it stays");
    }
    // The claim's file stays until every instance is gone: kubelet retries the unprepare, and an
    // instance destroyed by an earlier try answers Ok.
    if (auto destroyed = mig_.destroy(instance); !destroyed) {
      // NVML_ERROR_IN_USE (19): processes run on it.
      const Error& error = destroyed.error();
      bool in_use = error.category == ErrorCategory::kFailedPrecondition &&
                    error.message.find("NVML error 19") != std::string::npos;
      std::string why =
          in_use ? " is in use (processes run on it: NVML_ERROR_IN_USE)" : ": " + error.message;
      return Error{error.category, which + why + "; it stays, and kubelet retries the unprepare"};
    }
  }
  return Ok();
}

}  // namespace tessera::dra

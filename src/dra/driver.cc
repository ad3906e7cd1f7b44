// The driver's node state: prepare and unprepare with their files (per-claim CDI spec and
// checkpoint file), and the health/lease state that decides what is published.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>

#include "common/atomic_file.h"
#include "dra/dra.h"

namespace tessera::dra {
namespace {

HealthStatus HealthOf(const NodeDevice& device, const DeviceState& state) {
  bool unhealthy = state.unhealthy.count(device.pci_address) > 0 || FaultOf(device, state);
  return unhealthy ? HealthStatus::kUnhealthy : HealthStatus::kHealthy;
}

}  // namespace

Driver::Driver(DriverConfig config, NodeDevices node, ClaimFetcher fetch)
    : config_(std::move(config)), node_(std::move(node)), fetch_(std::move(fetch)) {
  const int64_t now = std::time(nullptr);
  for (const auto& device : node_.devices)
    health_changed_[device.name] = now;
}

void Driver::SetFabric(FabricHooks hooks) {
  fabric_ = std::move(hooks);
}

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

std::vector<std::string> Driver::PreparedClaimUids() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (const auto& [uid, claim] : checkpoint_)
    out.push_back(uid);
  return out;
}

std::vector<std::string> Driver::ClaimsHolding(const std::string& pci_address) const {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (const auto& [uid, claim] : checkpoint_) {
    auto addresses = PciAddressesOf(claim);
    if (std::find(addresses.begin(), addresses.end(), pci_address) != addresses.end())
      out.push_back(uid);
  }
  return out;
}

std::vector<std::string> Driver::PciAddressesOf(const PreparedClaim& claim) const {
  std::vector<std::string> out;
  for (const auto& prepared : claim.devices) {
    const NodeDevice* device = node_.Find(prepared.device_name);
    // MIG devices name their parent's address once.
    if (device && std::find(out.begin(), out.end(), device->pci_address) == out.end())
      out.push_back(device->pci_address);
  }
  return out;
}

std::string Driver::PreparedDir() const {
  return config_.plugin_dir + "/prepared";
}

Result<std::vector<std::string>> Driver::Load() {
  const std::string dir = PreparedDir();
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return ErrnoError("create directory " + dir, errno);
  }
  // Earlier versions kept every claim in one checkpoint.json: its claims become files, durably,
  // before it goes.
  const std::string legacy = config_.plugin_dir + "/checkpoint.json";
  std::vector<std::string> dropped;
  auto old = ReadCheckpoint(legacy);
  if (!old && old.error().category != ErrorCategory::kInvalidArgument) return old.error();
  if (!old) {
    // Not a file it can read (a FIFO, a device, too large) or not a checkpoint: kubelet prepares
    // its claims again, as after a torn per-claim file.
    dropped.push_back(old.error().message + "; dropped");
  } else if (!old->empty()) {
    for (const auto& [uid, claim] : *old) {
      if (auto written = WritePreparedClaim(dir, claim, Durability::kWholeOnPowerLoss); !written) {
        return written.error();
      }
    }
    if (auto synced = SyncDirectory(dir); !synced) return synced.error();
  }
  if (auto removed = RemoveFile(legacy); !removed) return removed.error();

  auto checkpoint = ReadPreparedClaims(dir, &dropped);
  if (!checkpoint) return checkpoint.error();
  std::lock_guard lock(mu_);
  checkpoint_.clear();
  pending_.clear();
  for (auto& [uid, claim] : *checkpoint)
    (claim.pending ? pending_ : checkpoint_)[uid] = std::move(claim);
  return dropped;
}

Status Driver::WriteClaimSpec(const PreparedClaim& prepared, bool only_if_missing) const {
  std::string spec_path = ClaimSpecPath(config_.cdi_dir, prepared.ref.uid);
  if (only_if_missing && ::access(spec_path.c_str(), F_OK) == 0) return Ok();
  auto spec = BuildClaimSpec(prepared, node_);
  if (!spec) return spec.error();
  // Whole after a power loss (a torn spec in a disk-backed CDI dir would fail every CDI
  // lookup), but its rename need not be durable: a missing spec is rebuilt from the checkpoint
  // when kubelet prepares the claim again after the reboot.
  auto written = cdi::WriteSpecFile(spec_path, cdi::ToJson(*spec), Durability::kWholeOnPowerLoss);
  if (!written) return written.error();
  return Ok();
}

Result<PreparedClaim> Driver::Prepare(const ClaimRef& ref) {
  // The UID names the claim's files.
  if (!IsFileNameSafeUid(ref.uid)) return InvalidArgument("claim UID: not a UID");
  {
    std::lock_guard lock(mu_);
    // kubelet retries after a timeout or a restart: a prepared claim answers the same, with its
    // spec written again if it is gone.
    if (auto it = checkpoint_.find(ref.uid); it != checkpoint_.end()) {
      // Active already (the activator answers at once), or again after a fabric-manager restart.
      if (fabric_.activate) {
        if (auto active = fabric_.activate(ref.uid, PciAddressesOf(it->second)); !active)
          return active.error().WithContext("claim " + ref.namespace_name + "/" + ref.name);
      }
      if (auto status = WriteClaimSpec(it->second, true); !status) return status.error();
      return it->second;
    }
  }
  // The GET runs without the lock: other claims go on while the API server answers.
  auto text = fetch_(ref.namespace_name, ref.name);
  if (!text) return text.error().WithContext("get claim " + ref.namespace_name + "/" + ref.name);
  auto claim = ParseResourceClaim(*text);
  if (!claim) return claim.error().WithContext("claim " + ref.namespace_name + "/" + ref.name);

  std::lock_guard lock(mu_);
  if (auto it = checkpoint_.find(ref.uid); it != checkpoint_.end()) return it->second;
  PrepareContext context{config_.driver, config_.node_name, &node_, &state_};
  auto prepared = PlanPrepare(ref, *claim, context);
  if (!prepared) return prepared.error();
  const std::string claim_name = "claim " + ref.namespace_name + "/" + ref.name;
  // MIG by demand: a GPU is either whole or partitioned, and a placement's instance is made now.
  if (auto fits = CheckPartitioning(*prepared); !fits) return fits.error().WithContext(claim_name);
  if (auto made = MakeInstances(*prepared); !made) return made.error().WithContext(claim_name);
  // The partition before the claim is handed out: a claim whose GPUs are not exactly one
  // partition is refused here, with nothing activated and no file written.
  if (fabric_.activate) {
    if (auto active = fabric_.activate(ref.uid, PciAddressesOf(*prepared)); !active) {
      UndoInstances(*prepared);
      return active.error().WithContext(claim_name);
    }
  }
  // The spec first: a checkpoint file promises CDI IDs that resolve.
  Status written = WriteClaimSpec(*prepared, false);
  // A prepare lost with a power loss is harmless, so the claim's file is not fsynced: kubelet
  // prepares again after the reboot (its checkpoint restores claims as not prepared:
  // newClaimInfoFromState in pkg/kubelet/cm/dra/claiminfo.go), an unknown claim is fetched anew,
  // and Unprepare removes the spec and the file by the claim's UID whether or not they were
  // written. A file torn by the power loss is dropped on start for the same reason; it holds this
  // claim only, where a torn checkpoint.json would have held every claim. The rename is to a
  // name that does not exist yet, which ext4 does not flush as it flushes a rename over a file.
  // Only removals must be durable (see Unprepare). So on a tmpfs CDI dir a prepare waits on no
  // disk.
  if (written) written = WritePreparedClaim(PreparedDir(), *prepared, Durability::kProcessCrash);
  if (!written) {
    // Neither file alone: an entry without its spec would answer kubelet with CDI IDs that
    // resolve to nothing. A pending claim's file goes with its instances.
    ::unlink(ClaimSpecPath(config_.cdi_dir, ref.uid).c_str());
    if (!pending_.count(ref.uid))
      (void)RemoveFile(PreparedClaimPath(PreparedDir(), ref.uid), Durability::kProcessCrash);
    if (fabric_.deactivate) (void)fabric_.deactivate(ref.uid);
    UndoInstances(*prepared);
    return written.error();
  }
  pending_.erase(ref.uid);
  checkpoint_[ref.uid] = *prepared;
  return prepared;
}

Status Driver::Unprepare(const ClaimRef& ref) {
  if (!IsFileNameSafeUid(ref.uid)) return InvalidArgument("claim UID: not a UID");
  std::lock_guard lock(mu_);
  // The instances this plugin made for the claim go first; one still in use keeps the claim.
  if (auto destroyed = DestroyClaimInstances(ref); !destroyed) {
    return destroyed.error().WithContext("claim " + ref.namespace_name + "/" + ref.name);
  }
  // A claim with intents only: what a prepare cut short made at their places goes.
  if (auto released = ReleasePending(ref); !released) {
    return released.error().WithContext("claim " + ref.namespace_name + "/" + ref.name);
  }
  std::string spec_path = ClaimSpecPath(config_.cdi_dir, ref.uid);
  if (::unlink(spec_path.c_str()) != 0 && errno != ENOENT) {
    return ErrnoError("unlink " + spec_path, errno);
  }
  // Durable before kubelet hears of it: a removal lost with a power loss would leave a file that
  // answers a later prepare of the same UID, reallocated meanwhile, with the old devices.
  if (auto removed = RemoveFile(PreparedClaimPath(PreparedDir(), ref.uid)); !removed) {
    return removed.error();
  }
  checkpoint_.erase(ref.uid);
  pending_.erase(ref.uid);
  // Unprepared first, then deactivated; an unknown claim holds nothing.
  if (fabric_.deactivate) {
    if (auto released = fabric_.deactivate(ref.uid); !released)
      return released.error().WithContext("claim " + ref.namespace_name + "/" + ref.name);
  }
  return Ok();
}

bool Driver::SetState(DeviceState state) {
  std::lock_guard lock(mu_);
  auto before = PublishedDevices(node_, state_);
  auto taints_before = DeviceTaints(node_, state_);
  bool health_changed = false;
  const int64_t now = std::time(nullptr);
  for (const auto& device : node_.devices) {
    if (HealthOf(device, state_) != HealthOf(device, state)) {
      health_changed_[device.name] = now;
      health_changed = true;
    }
  }
  state_ = std::move(state);
  if (health_changed) {
    ++health_version_;
    health_changed_cv_.notify_all();
  }
  return PublishedDevices(node_, state_) != before || DeviceTaints(node_, state_) != taints_before;
}

std::map<std::string, DeviceTaint> Driver::Taints() const {
  std::lock_guard lock(mu_);
  return DeviceTaints(node_, state_);
}

HealthSnapshot Driver::Health() const {
  std::lock_guard lock(mu_);
  HealthSnapshot snapshot;
  snapshot.version = health_version_;
  for (const auto& device : node_.devices) {
    snapshot.devices.push_back(
        {device.name, HealthOf(device, state_), health_changed_.at(device.name)});
  }
  return snapshot;
}

void Driver::WaitForHealthChange(uint64_t seen, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  health_changed_cv_.wait_for(lock, timeout, [&] { return health_version_ != seen; });
}

std::vector<std::string> Driver::Published() const {
  std::lock_guard lock(mu_);
  return PublishedDevices(node_, state_);
}

}  // namespace tessera::dra

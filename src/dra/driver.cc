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

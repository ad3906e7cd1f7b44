// The driver's node state: prepare and unprepare with their files (per-claim CDI spec,
// checkpoint), and the health/lease state that decides what is published.
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <future>

#include "dra/dra.h"

namespace tessera::dra {

Driver::Driver(DriverConfig config, NodeDevices node, ClaimFetcher fetch)
    : config_(std::move(config)), node_(std::move(node)), fetch_(std::move(fetch)) {
  const int64_t now = std::time(nullptr);
  for (const auto& device : node_.devices)
    health_changed_[device.name] = now;
}

std::string Driver::CheckpointPath() const {
  return config_.plugin_dir + "/checkpoint.json";
}

Status Driver::Load() {
  auto checkpoint = ReadCheckpoint(CheckpointPath());
  if (!checkpoint) return checkpoint.error();
  std::lock_guard lock(mu_);
  checkpoint_ = std::move(*checkpoint);
  return Ok();
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
  {
    std::lock_guard lock(mu_);
    // kubelet retries after a timeout or a restart: a prepared claim answers the same, with its
    // spec written again if it is gone.
    if (auto it = checkpoint_.find(ref.uid); it != checkpoint_.end()) {
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
  const std::string spec_path = ClaimSpecPath(config_.cdi_dir, ref.uid);
  checkpoint_[ref.uid] = *prepared;
  // Both files wait on their own fsync, so they are written side by side.
  auto spec_written =
      std::async(std::launch::async, [&] { return WriteClaimSpec(*prepared, false); });
  // A prepare lost with a power loss is harmless, so its rename need not be durable: kubelet
  // prepares again after the reboot and an unknown claim is fetched anew; Unprepare removes the
  // spec by the claim's UID whether or not the checkpoint names it. The file must be whole,
  // though: a torn checkpoint would keep the plugin from starting.
  Status saved = WriteCheckpoint(CheckpointPath(), checkpoint_, Durability::kWholeOnPowerLoss);
  Status spec = spec_written.get();
  if (!saved || !spec) {
    // Neither file alone: without a checkpoint entry a restarted plugin would not know to
    // remove the spec, and an entry without its spec would answer kubelet with CDI IDs that
    // resolve to nothing.
    checkpoint_.erase(ref.uid);
    ::unlink(spec_path.c_str());
    if (saved) (void)WriteCheckpoint(CheckpointPath(), checkpoint_);
    return saved ? spec.error() : saved.error();
  }
  return prepared;
}

Status Driver::Unprepare(const ClaimRef& ref) {
  std::lock_guard lock(mu_);
  std::string spec_path = ClaimSpecPath(config_.cdi_dir, ref.uid);
  if (::unlink(spec_path.c_str()) != 0 && errno != ENOENT) {
    return ErrnoError("unlink " + spec_path, errno);
  }
  if (checkpoint_.erase(ref.uid) == 0) return Ok();
  // Durable before kubelet hears of it: a removal lost with a power loss would leave an entry
  // that answers a later prepare of the same UID, reallocated meanwhile, with the old devices.
  return WriteCheckpoint(CheckpointPath(), checkpoint_, Durability::kPowerLoss);
}

bool Driver::SetState(DeviceState state) {
  std::lock_guard lock(mu_);
  auto before = PublishedDevices(node_, state_);
  bool health_changed = false;
  const int64_t now = std::time(nullptr);
  for (const auto& device : node_.devices) {
    if (state_.unhealthy.count(device.pci_address) != state.unhealthy.count(device.pci_address)) {
      health_changed_[device.name] = now;
      health_changed = true;
    }
  }
  state_ = std::move(state);
  if (health_changed) {
    ++health_version_;
    health_changed_cv_.notify_all();
  }
  return PublishedDevices(node_, state_) != before;
}

HealthSnapshot Driver::Health() const {
  std::lock_guard lock(mu_);
  HealthSnapshot snapshot;
  snapshot.version = health_version_;
  for (const auto& device : node_.devices) {
    bool unhealthy = state_.unhealthy.count(device.pci_address) > 0;
    snapshot.devices.push_back({device.name,
                                unhealthy ? HealthStatus::kUnhealthy : HealthStatus::kHealthy,
                                health_changed_.at(device.name)});
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

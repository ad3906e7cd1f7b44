#include "serve/gpus.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>

#include "common/untrusted_text.h"
#include "firmware/firmware.h"
#include "serve/audit.h"
#include "serve/faults.h"
#include "serve/mig_demand.h"
#include "serve/mig_shares.h"

namespace tessera::serve {

using fleet::ContainerState;
using fleet::GpuRecord;
using fleet::LeaseState;
using fleet::Mutation;

Result<GpuAction> ParseGpuAction(std::string_view name) {
  if (name == "drain") return GpuAction::kDrain;
  if (name == "undrain") return GpuAction::kUndrain;
  if (name == "quarantine") return GpuAction::kQuarantine;
  if (name == "release") return GpuAction::kRelease;
  return NotFound("GPU action \"" + std::string(name) +
                  "\" is unknown (drain, undrain, quarantine, release)");
}

Status Gpus::CheckRequest(int gpus) const {
  std::lock_guard lock(model_.mu);
  if (model_.options.fleet) return CheckFleetRequestLocked(gpus);
  // A GPU in MIG mode is handed out by slice only.
  const auto whole = std::count_if(model_.gpus.begin(), model_.gpus.end(),
                                   [](const GpuRecord& gpu) { return !gpu.mig_enabled; });
  if (gpus > whole)
    return FailedPrecondition("gpus: this host has " + std::to_string(whole) +
                              " GPUs not in MIG mode, " + std::to_string(gpus) + " requested");
  if (model_.chooser && model_.chooser->planner() && !model_.chooser->planner()->HasSize(gpus))
    return FailedPrecondition("gpus: no fabric partition has " + std::to_string(gpus) + " GPUs");
  return Ok();
}

bool Gpus::MigSlicesFreeLocked(const std::string& profile) const {
  for (const auto& gpu : model_.gpus) {
    if (!gpu.mig_enabled || !gpu.available || gpu.drain_requested || gpu.quarantine_requested)
      continue;
    if (gpu.state != LeaseState::kFree && gpu.state != LeaseState::kReserved &&
        gpu.state != LeaseState::kActive)
      continue;
    for (const auto& slice : gpu.mig_slices)
      if (slice.profile == profile && slice.container_id.empty() && !slice.shared) return true;
  }
  return false;
}

Status Gpus::CheckMigRequest(const fleet::MigRequest& mig) const {
  std::lock_guard lock(model_.mu);
  // The fleet's nodes publish whole GPUs; a MIG device there is claimed through DRA
  // (DeviceClass mig.gpu.tessera.dev), not placed by this service.
  if (model_.options.fleet)
    return InvalidArgument(
        "mig: the kubernetes backend places whole GPUs; claim MIG devices with a ResourceClaim "
        "of DeviceClass mig.gpu.tessera.dev");
  int total = 0, possible = 0;
  std::set<std::string> profiles;
  for (const auto& gpu : model_.gpus) {
    if (!gpu.mig_enabled) continue;
    int here = 0;
    for (const auto& slice : gpu.mig_slices) {
      if (slice.profile.empty()) continue;
      profiles.insert(slice.profile);
      if (slice.profile == mig.profile) ++here;
    }
    total += here;
    // MIG by demand: as many as the board can hold of the profile may be made.
    const mig::ProfileTable* table =
        model_.options.mig_shaper ? model_.options.mig_shaper->TableOf(gpu.pci_address) : nullptr;
    const mig::Profile* profile = table ? table->FindByName(mig.profile) : nullptr;
    if (table)
      for (const auto& offered : table->profiles)
        profiles.insert(offered.name);
    possible += std::max(here, profile ? static_cast<int>(profile->max_instances) : 0);
  }
  if (total >= mig.count || possible >= mig.count) return Ok();
  if (possible > total) total = possible;
  std::string offered;
  for (const auto& profile : profiles)
    offered += (offered.empty() ? "" : ", ") + profile;
  // The profile was checked for its shape only: named here, it is at most 32 plain characters.
  return FailedPrecondition(
      std::string("mig: this host ") + (model_.options.mig_shaper ? "can hold " : "has ") +
      std::to_string(total) + " MIG devices of " + mig.profile + ", " + std::to_string(mig.count) +
      " requested" +
      (offered.empty() ? " (no GPU is in MIG mode)" : " (profiles here: " + offered + ")"));
}

Status Gpus::CheckShareRequest(const sharing::Share& share) const {
  std::lock_guard lock(model_.mu);
  if (model_.options.fleet)
    return InvalidArgument(
        "share: the kubernetes backend places whole GPUs; share GPUs there with the device "
        "plugin's sharing.mps or sharing.timeSlicing");
  if (!share.mig_profile.empty()) return CheckMigShareRequestLocked(share);
  // Whether any GPU here could ever hold it (one it fits once its other shares end).
  const uint64_t reserve = model_.options.sharing.reserve_bytes;
  uint64_t largest = 0;
  int shareable = 0;
  for (const auto& gpu : model_.gpus) {
    if (gpu.mig_enabled || gpu.memory_bytes == 0 || !gpu.node.empty()) continue;
    ++shareable;
    if (gpu.memory_bytes > reserve) largest = std::max(largest, gpu.memory_bytes - reserve);
  }
  if (shareable == 0)
    return FailedPrecondition(
        "share: no GPU here can be shared (none whose memory NVML could tell, outside MIG mode)");
  if (share.memory_bytes > largest)
    return FailedPrecondition("share: " + sharing::FormatMemory(share.memory_bytes) +
                              " is more than any GPU here holds for shares (" +
                              sharing::FormatGiB(largest) + " after a reserve of " +
                              sharing::FormatGiB(reserve) + ")");
  return Ok();
}

Status Gpus::CheckMigShareRequestLocked(const sharing::Share& share) const {
  // Some slice of its profile here, with the memory for it: the largest such slice less the
  // reserve. The profile was checked for its shape (at most 32 plain characters) before.
  const uint64_t reserve = model_.options.sharing.reserve_bytes;
  uint64_t largest = 0;
  bool found = false;
  std::set<std::string> profiles;
  for (const auto& gpu : model_.gpus) {
    if (!gpu.mig_enabled || !gpu.node.empty()) continue;
    for (const auto& slice : gpu.mig_slices) {
      if (slice.profile.empty()) continue;
      profiles.insert(slice.profile);
      if (slice.profile != share.mig_profile) continue;
      found = true;
      const uint64_t memory = SliceMemory(slice);
      if (memory > reserve) largest = std::max(largest, memory - reserve);
    }
  }
  // MIG by demand: where no slice of the profile exists yet, one the board offers may be made
  // (its memory then as the profile's name says; an existing slice's is NVML's figure).
  for (const auto& gpu : model_.gpus) {
    const mig::ProfileTable* table =
        model_.options.mig_shaper && gpu.mig_enabled && gpu.node.empty()
            ? model_.options.mig_shaper->TableOf(gpu.pci_address)
            : nullptr;
    if (!table) continue;
    for (const auto& offered : table->profiles)
      profiles.insert(offered.name);
    if (found || !table->FindByName(share.mig_profile)) continue;
    found = true;
    fleet::MigSlice possible;
    possible.profile = share.mig_profile;
    const uint64_t memory = SliceMemory(possible);
    if (memory > reserve) largest = std::max(largest, memory - reserve);
  }
  if (!found) {
    std::string offered;
    for (const auto& profile : profiles)
      offered += (offered.empty() ? "" : ", ") + profile;
    return FailedPrecondition(
        std::string("share.mig: this host ") + (model_.options.mig_shaper ? "can make" : "has") +
        " no MIG device of " + share.mig_profile +
        (offered.empty() ? " (no GPU is in MIG mode)" : " (profiles here: " + offered + ")"));
  }
  if (share.memory_bytes > largest)
    return FailedPrecondition("share: " + sharing::FormatMemory(share.memory_bytes) +
                              " is more than a MIG device of " + share.mig_profile +
                              " holds for shares (" + sharing::FormatGiB(largest) +
                              " after a reserve of " + sharing::FormatGiB(reserve) + ")");
  return Ok();
}

void Gpus::RebuildFleetLocked() {
  model_.placement.reset();
  model_.placement_nodes.clear();
  std::vector<placement::NodeSpec> specs;
  for (size_t n = 0; n < model_.nodes.size(); ++n) {
    const Model::Node& node = model_.nodes[n];
    if (!node.chooser || node.gpus.empty()) continue;
    if (!model_.options.only_node.empty() && node.name != model_.options.only_node) continue;
    placement::NodeSpec spec;
    spec.name = node.name;
    spec.gpu_count =
        node.planner ? node.planner->module_count() : static_cast<int>(node.gpus.size());
    spec.partitions = node.planner;
    // The scheduler places on the fleet's choice of GPUs: without a table, the best-linked ones
    // by the node's own scorer. Non-owning: this fleet is rebuilt whenever model_.nodes is.
    if (!node.planner)
      spec.scorer = std::shared_ptr<const topology::GpuSetScorer>(std::shared_ptr<void>(),
                                                                  &node.chooser->scorer());
    specs.push_back(std::move(spec));
    model_.placement_nodes.push_back(n);
  }
  if (specs.empty()) return;
  auto created = placement::Fleet::Create(std::move(specs));
  if (!created) {
    spdlog::error("placement: {}", created.error().message);
    model_.placement_nodes.clear();
    return;
  }
  model_.placement = std::move(*created);
}

Status Gpus::CheckFleetRequestLocked(int gpus) const {
  int largest = 0;
  for (size_t f = 0; f < model_.placement_nodes.size(); ++f) {
    const Model::Node& node = model_.nodes[model_.placement_nodes[f]];
    largest = std::max(largest, static_cast<int>(node.gpus.size()));
    if (static_cast<int>(node.gpus.size()) < gpus) continue;
    if (!node.planner || node.planner->HasSize(gpus)) return Ok();
  }
  if (largest >= gpus)
    return FailedPrecondition("gpus: no node has a fabric partition of " + std::to_string(gpus) +
                              " GPUs");
  return FailedPrecondition("gpus: no node of the fleet has " + std::to_string(gpus) +
                            " GPUs (the largest has " + std::to_string(largest) + ")");
}

void Gpus::UpdateNodes(std::vector<NodeInventory> nodes) {
  std::lock_guard lock(model_.mu);
  std::vector<Mutation> mutations;
  std::vector<std::string> requeued;  // requests a published fault stopped, queued again
  std::set<std::string> listed;       // GPU IDs the nodes publish now
  std::vector<Model::Node> updated;
  for (auto& inventory : nodes) {
    Model::Node node;
    node.name = inventory.name;
    for (size_t i = 0; i < inventory.gpus.size(); ++i) {
      GpuRecord& gpu = inventory.gpus[i];
      gpu.node = inventory.name;
      gpu.index = static_cast<int>(i);
      listed.insert(gpu.id());
      GpuRecord* existing = model_.FindGpu(gpu.id());
      if (existing) {
        MergePublishedLocked(*existing, gpu, mutations, requeued);
      } else {
        // The option ROM of a GPU on another node is not readable here: its post-lease check is
        // the backend's (firmware-check Job on the node), which keeps its own baseline.
        gpu.state = gpu.health.in_service() ? LeaseState::kFree : LeaseState::kFaulted;
        gpu.reason = gpu.health.reason;
        gpu.firmware_baseline = "checked on node " + inventory.name;
        gpu.updated_ms = fleet::NowMs();
        spdlog::info("GPU {}: new ({})", gpu.id(), gpu.model);
        model_.gpus.push_back(gpu);
        mutations.push_back(gpu);
        model_.MarkLeasesChanged();
      }
      node.gpus.push_back(static_cast<size_t>(model_.FindGpu(gpu.id()) - model_.gpus.data()));
    }
    if (!node.gpus.empty()) {
      auto chooser = topology::GpuChooser::Create(inventory.topology, inventory.partition_table);
      if (chooser) {
        node.chooser = std::move(*chooser);
        if (inventory.partition_table) {
          auto planner = topology::PartitionPlanner::Create(*inventory.partition_table);
          if (planner) {
            node.planner = *planner;
            for (const auto& gpu : inventory.gpus) {
              int module = 0;
              for (const auto& [m, address] : inventory.partition_table->pci_addresses)
                if (address == gpu.pci_address) module = m;
              node.module_of.push_back(module);
            }
          }
          // A GPU without a module is never free in partition mode (the chooser says the same).
          if (std::find(node.module_of.begin(), node.module_of.end(), 0) != node.module_of.end() ||
              !node.planner) {
            spdlog::warn("node {}: GPUs and partition table do not match; not placed on",
                         node.name);
            node.chooser.reset();
          }
        }
      } else {
        spdlog::warn("node {}: {}; not placed on", node.name, chooser.error().message);
      }
    }
    updated.push_back(std::move(node));
  }
  for (auto& gpu : model_.gpus) {
    if (gpu.node.empty() || !gpu.available || listed.count(gpu.id())) continue;
    spdlog::warn("GPU {}: no longer published by node {}; unavailable", gpu.id(), gpu.node);
    gpu.available = false;
  }
  model_.nodes = std::move(updated);
  RebuildFleetLocked();
  model_.reschedule = true;
  model_.QueueChanged();
  if (faults_)
    faults_->CommitLocked(std::move(mutations), std::move(requeued));
  else
    model_.Commit(std::move(mutations), nullptr);
  model_.scheduler_wake.notify_one();
}

void Gpus::MergePublishedLocked(GpuRecord& existing, const GpuRecord& gpu,
                                std::vector<Mutation>& mutations,
                                std::vector<std::string>& requeued) {
  bool changed = existing.model != gpu.model || existing.cdi_device != gpu.cdi_device ||
                 existing.index != gpu.index;
  existing.model = gpu.model;
  existing.cdi_device = gpu.cdi_device;
  existing.index = gpu.index;
  if (!existing.available) {
    spdlog::info("GPU {}: available again", existing.id());
    existing.available = true;
  }
  if (changed) mutations.push_back(existing);
  // Its node watches it: a fault it publishes is contained here, a recovery frees it.
  if (faults_) faults_->ApplyPublishedLocked(existing, gpu.health, mutations, requeued);
}

bool HoldsGpuLocked(const Model& model, const Caller& caller, const GpuRecord& gpu) {
  if (caller.admin) return true;
  auto sees = [&](const std::string& container_id) {
    auto it = model.containers.find(container_id);
    return it != model.containers.end() && caller.Sees(it->second);
  };
  if (sees(gpu.container_id)) return true;
  for (const auto& slice : gpu.mig_slices)
    if (sees(slice.container_id)) return true;
  for (const auto& share : gpu.shares)
    if (sees(share.container_id)) return true;
  return false;
}

namespace gpus_detail {

bool NameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.';
}

// `text` with every word that is the name of a tenancy other than `own` replaced: a fault's
// reason may name the tenancies whose work it touched, and a tenant learns only of its own.
std::string WithoutOtherTenancies(const std::string& text, const Model& model,
                                  const std::string& own) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    if (!NameChar(text[i])) {
      out += text[i++];
      continue;
    }
    size_t end = i;
    while (end < text.size() && NameChar(text[end]))
      ++end;
    const std::string word = text.substr(i, end - i);
    out += word != own && model.tenancies.count(word) ? "(another tenancy)" : word;
    i = end;
  }
  return out;
}

}  // namespace gpus_detail

void RedactHealthLocked(const Model& model, const Caller& caller, health::GpuHealth& health) {
  if (caller.admin) return;
  health.reason = gpus_detail::WithoutOtherTenancies(health.reason, model, caller.tenancy);
  for (auto& entry : health.history)
    entry.reason = gpus_detail::WithoutOtherTenancies(entry.reason, model, caller.tenancy);
}

void RedactGpuLocked(const Model& model, const Caller& caller, GpuRecord& gpu) {
  if (caller.admin) return;
  RedactHealthLocked(model, caller, gpu.health);
  // A GPU none of the tenancy's containers holds is shown by its state only: its UUID (in its
  // CDI name) is another tenancy's business, or nobody's.
  if (!HoldsGpuLocked(model, caller, gpu)) {
    gpu.cdi_device.clear();
    gpu.uuid.clear();
  }
  // The holder's name is not enough: an earlier owner of the name is someone else.
  auto holder = model.containers.find(gpu.container_id);
  if (holder == model.containers.end() || !caller.Sees(holder->second)) {
    gpu.tenancy.clear();
    gpu.container_id.clear();
  }
  for (auto& slice : gpu.mig_slices) {
    auto slice_holder = model.containers.find(slice.container_id);
    if (slice_holder == model.containers.end() || !caller.Sees(slice_holder->second)) {
      // Another tenancy's slice shows as taken, not by whom.
      if (!slice.container_id.empty()) slice.container_id = "(held)";
      slice.tenancy.clear();
    }
  }
  for (auto& share : gpu.shares) {
    auto share_holder = model.containers.find(share.container_id);
    if (share_holder == model.containers.end() || !caller.Sees(share_holder->second)) {
      share.container_id = "(held)";
      share.tenancy.clear();
    }
    share.tenancy_uid.clear();
  }
  gpu.firmware_baseline.clear();
}

std::vector<GpuRecord> Gpus::List(const Caller& caller) const {
  std::lock_guard lock(model_.mu);
  std::vector<GpuRecord> out = model_.gpus;
  for (auto& gpu : out)
    RedactGpuLocked(model_, caller, gpu);
  return out;
}

Result<GpuRecord> Gpus::Get(const Caller& caller, const std::string& gpu_id) const {
  std::lock_guard lock(model_.mu);
  const GpuRecord* gpu = model_.FindGpu(gpu_id);
  if (!gpu) return NotFound("GPU " + Excerpt(gpu_id, 64) + " not found");
  GpuRecord out = *gpu;
  RedactGpuLocked(model_, caller, out);
  return out;
}

void Gpus::Admin(const Caller& caller, const std::string& gpu_id, GpuAction action,
                 std::string reason, Done<GpuRecord> done) {
  if (!caller.admin) return done(PermissionDenied("GPU administration needs the admin token"));
  std::lock_guard lock(model_.mu);
  if (auto refused = model_.WriteRefusal(); !refused) return done(refused.error());
  auto* gpu = model_.FindGpu(gpu_id);
  if (!gpu) return done(NotFound("GPU " + Excerpt(gpu_id, 64) + " not found"));
  std::vector<Mutation> mutations;
  if (auto status = ApplyActionLocked(gpu_id, *gpu, action, reason, mutations); !status)
    return done(status.error());
  model_.QueueChanged();
  model_.scheduler_wake.notify_one();
  GpuRecord result = *gpu;
  mutations.push_back(AuditOf(
      caller, {GpuAuditAction(action), "gpu", gpu_id, ""}, "ok",
      std::string(fleet::LeaseStateName(result.state)) + (reason.empty() ? "" : ": " + reason)));
  model_.Commit(std::move(mutations), [done = std::move(done), result](Status status) {
    if (!status) return done(status.error());
    done(result);
  });
}

Status Gpus::ApplyActionLocked(const std::string& gpu_id, GpuRecord& gpu, GpuAction action,
                               const std::string& reason, std::vector<Mutation>& mutations) {
  const LeaseState state = gpu.state;
  switch (action) {
    case GpuAction::kDrain:
      if (state == LeaseState::kFree) {
        model_.SetGpuState(gpu, LeaseState::kDraining,
                           reason.empty() ? "drained by an operator" : reason, mutations);
      } else if (gpu.leased()) {
        gpu.drain_requested = true;
        mutations.push_back(gpu);
      }
      break;
    case GpuAction::kUndrain:
      if (state == LeaseState::kDraining) {
        model_.SetGpuState(gpu, LeaseState::kFree, "", mutations);
        model_.reschedule = true;
      } else if (gpu.leased()) {
        gpu.drain_requested = false;
        mutations.push_back(gpu);
      } else if (state == LeaseState::kQuarantined) {
        return FailedPrecondition("GPU " + gpu_id +
                                  " is quarantined, not draining; release it instead");
      }
      break;
    case GpuAction::kQuarantine:
      if (state == LeaseState::kFree || state == LeaseState::kDraining) {
        model_.SetGpuState(gpu, LeaseState::kQuarantined,
                           reason.empty() ? "quarantined by an operator" : reason, mutations);
      } else if (gpu.leased()) {
        gpu.quarantine_requested = true;
        mutations.push_back(gpu);
      }
      break;
    case GpuAction::kRelease:
      return ReleaseLocked(gpu_id, gpu, mutations);
  }
  return Ok();
}

Status Gpus::ReleaseLocked(const std::string& gpu_id, GpuRecord& gpu,
                           std::vector<Mutation>& mutations) {
  const LeaseState state = gpu.state;
  const bool held = state == LeaseState::kReserved || state == LeaseState::kActive;
  if (state == LeaseState::kQuarantined || state == LeaseState::kDraining) {
    // The operator vouches for the firmware as it is now: it becomes the new baseline (on
    // another node, the backend's check keeps its own).
    if (gpu.node.empty()) {
      auto digest = firmware::HashOptionRom(model_.options.root, gpu.pci_address);
      if (!digest) return digest.error();
      gpu.firmware_baseline = *digest;
    }
    gpu.drain_requested = gpu.quarantine_requested = false;
    model_.SetGpuState(gpu, LeaseState::kFree, "", mutations);
    model_.reschedule = true;
  } else if (held) {
    StopHoldersLocked(gpu, mutations);
  } else if (state == LeaseState::kReleasing || state == LeaseState::kChecking) {
    return FailedPrecondition("GPU " + gpu_id + " is " + fleet::LeaseStateName(state) +
                              "; its firmware check decides what comes next");
  } else if (state == LeaseState::kFaulted) {
    // A GPU that stays out after its faults (or one still recovering) returns on the
    // operator's word; its history stays.
    if (!faults_) return FailedPrecondition("GPU " + gpu_id + " is faulted");
    return faults_->ReleaseLocked(gpu, mutations);
  }
  return Ok();
}

void Gpus::StopHoldersLocked(const GpuRecord& gpu, std::vector<Mutation>& mutations) {
  // End the lease the normal way: stop the holder (every slice's, in MIG mode); the last
  // exit runs the check.
  std::set<std::string> holders = {gpu.container_id};
  for (const auto& slice : gpu.mig_slices)
    if (!slice.container_id.empty()) holders.insert(slice.container_id);
  // Every share's (a shared slice names only one of its shares).
  for (const auto& share : gpu.shares)
    holders.insert(share.container_id);
  for (const auto& holder : holders) {
    auto it = model_.containers.find(holder);
    if (it == model_.containers.end() || fleet::IsTerminal(it->second.state) ||
        it->second.stop_requested)
      continue;
    it->second.stop_requested = true;
    mutations.push_back(it->second);
    if (it->second.state == ContainerState::kRunning) model_.to_stop.push_back(it->first);
  }
}

}  // namespace tessera::serve

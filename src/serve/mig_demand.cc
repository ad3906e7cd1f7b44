// MIG by demand: the thread that makes the instances waiting MIG requests need.
#include "serve/mig_demand.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>

#include "serve/audit.h"
#include "serve/mig_shares.h"
#include "serve/model.h"
#include "serve/request_order.h"

namespace tessera::serve {
namespace {

using Clock = std::chrono::steady_clock;
// An instance whose destroy NVML refused counts as busy this long before it is tried again.
constexpr auto kRefusedFor = std::chrono::seconds(60);
// After a change that failed, the next decision waits this long.
constexpr auto kFailedBackoff = std::chrono::seconds(2);

bool LetsSlicesIn(const fleet::GpuRecord& gpu) {
  return gpu.mig_enabled && gpu.available && !gpu.drain_requested && !gpu.quarantine_requested &&
         (gpu.state == fleet::LeaseState::kFree || gpu.state == fleet::LeaseState::kReserved ||
          gpu.state == fleet::LeaseState::kActive);
}

// The MIG requests still waiting, in the queue's fair order (mu held).
std::vector<MigWant> WantsInOrderLocked(Model& model) {
  std::vector<fleet::ContainerRecord*> pending;
  for (const auto& id : model.mig_pending) {
    auto it = model.containers.find(id);
    if (it == model.containers.end() || it->second.state != fleet::ContainerState::kPending ||
        it->second.started || it->second.spec.mig.count == 0)
      continue;
    pending.push_back(&it->second);
  }
  std::vector<MigWant> wants;
  RequestOrder order(std::move(pending), *model.queue);
  while (fleet::ContainerRecord* container = order.Next()) {
    if (wants.size() >= kMaxMigWants) break;
    wants.push_back({container->id, container->spec.mig.profile, container->spec.mig.count});
  }
  // Shares of a MIG slice that found no room: one slice at a time per profile (the shares that
  // wait fill it before another is made).
  for (const auto& [profile, id] : FirstPendingMigSharesLocked(model)) {
    if (wants.size() >= kMaxMigWants) break;
    wants.push_back({id, profile, 1});
  }
  return wants;
}

std::string StepText(const mig::ShapeStep& step) {
  std::string text;
  for (uint32_t id : step.destroy)
    text += fmt::format("destroy GI {}; ", id);
  return text + fmt::format("create {} at {}+{}", step.create.profile, step.create.placement.start,
                            step.create.placement.size);
}

// The GPU's MIG devices read again, each holder kept (a held slice NVML no longer lists stays,
// said so: a holder is never dropped here).
void MergeSlices(fleet::GpuRecord& gpu, std::vector<fleet::MigSlice> fresh) {
  for (auto& slice : fresh)
    for (const auto& old : gpu.mig_slices)
      if (old.id == slice.id) {
        slice.container_id = old.container_id;
        slice.tenancy = old.tenancy;
      }
  for (const auto& old : gpu.mig_slices) {
    if (old.container_id.empty()) continue;
    auto same = [&](const auto& slice) { return slice.id == old.id; };
    if (std::find_if(fresh.begin(), fresh.end(), same) != fresh.end()) continue;
    spdlog::warn("GPU {}: MIG device {} of container {} is no longer listed", gpu.pci_address,
                 old.id, old.container_id);
    fresh.push_back(old);
  }
  gpu.mig_slices = std::move(fresh);
}

}  // namespace

MigDemand::MigDemand(Model& model, std::shared_ptr<MigShaper> shaper)
    : model_(model), shaper_(std::move(shaper)) {}

MigDemand::~MigDemand() {
  Stop();
}

void MigDemand::Start() {
  if (thread_.joinable()) return;
  {
    std::lock_guard lock(model_.mu);
    stopping_ = false;
  }
  thread_ = std::thread([this] { Loop(); });
}

void MigDemand::Stop() {
  {
    std::lock_guard lock(model_.mu);
    stopping_ = true;
  }
  model_.mig_demand_wake.notify_all();
  if (thread_.joinable()) thread_.join();
}

void MigDemand::ReadInstances() {
  std::vector<std::string> pcis;
  {
    std::lock_guard lock(model_.mu);
    for (const auto& gpu : model_.gpus)
      if (gpu.mig_enabled && gpu.node.empty()) pcis.push_back(gpu.pci_address);
  }
  std::map<std::string, std::vector<mig::LiveInstance>> read;
  for (const auto& pci : pcis) {
    auto instances = shaper_->Instances(pci);
    if (!instances) {
      spdlog::warn("GPU {}: MIG instances cannot be read, none is changed: {}", pci,
                   instances.error().message);
      continue;
    }
    read[pci] = std::move(*instances);
  }
  std::lock_guard lock(model_.mu);
  model_.mig_instances = std::move(read);
}

MigDemand::Snapshot MigDemand::SnapshotLocked() {
  Snapshot out;
  out.wants = WantsInOrderLocked(model_);
  out.held = model_.mig_reservations;
  const auto now = Clock::now();
  std::set<std::string> waiting;
  for (const auto& want : out.wants)
    waiting.insert(want.id);
  // An instance made for a request stays its own until the request is placed or gone.
  for (auto it = promised_.begin(); it != promised_.end();)
    it = waiting.count(it->second) ? std::next(it) : promised_.erase(it);
  for (const auto& gpu : model_.gpus) {
    auto known = model_.mig_instances.find(gpu.pci_address);
    if (!gpu.mig_enabled || !gpu.available || known == model_.mig_instances.end()) continue;
    MigDemandGpu shape;
    shape.pci_address = gpu.pci_address;
    shape.table = shaper_->TableOf(gpu.pci_address);
    shape.placeable = LetsSlicesIn(gpu) && !model_.mig_reshaping.count(gpu.pci_address);
    shape.instances = known->second;
    for (auto& instance : shape.instances) {
      auto refused = refused_.find({gpu.pci_address, instance.gpu_instance_id});
      instance.busy = (refused != refused_.end() && refused->second > now) ||
                      promised_.count({gpu.pci_address, instance.gpu_instance_id});
      // A slice shares hold, or whose MPS daemon is still being torn down, is busy too.
      for (const auto& slice : gpu.mig_slices)
        if (slice.gpu_instance_id == instance.gpu_instance_id &&
            (!slice.container_id.empty() || slice.shared || slice.profile.empty()))
          instance.busy = true;
    }
    for (const auto& slice : gpu.mig_slices)
      if (slice.container_id.empty() && !slice.shared && !slice.profile.empty())
        shape.free_slices[slice.gpu_instance_id] = slice.profile;
    out.gpus.push_back(std::move(shape));
  }
  return out;
}

bool MigDemand::StillHoldsLocked(const Change& change) const {
  auto container = model_.containers.find(change.for_container);
  if (container == model_.containers.end() ||
      container->second.state != fleet::ContainerState::kPending || container->second.started)
    return false;
  for (const auto& gpu : model_.gpus) {
    if (gpu.pci_address != change.pci_address || !gpu.node.empty()) continue;
    if (!LetsSlicesIn(gpu) || model_.mig_reshaping.count(gpu.pci_address)) return false;
    for (const auto& slice : gpu.mig_slices)
      if ((!slice.container_id.empty() || slice.shared) &&
          std::count(change.step.destroy.begin(), change.step.destroy.end(), slice.gpu_instance_id))
        return false;
    return true;
  }
  return false;
}

std::optional<MigDemand::Change> MigDemand::AdoptLocked(const Snapshot& snapshot,
                                                        MigDemandDecision decision,
                                                        std::chrono::microseconds decided) {
  if (decision.reservations != model_.mig_reservations) {
    for (const auto& reservation : decision.reservations)
      if (std::find(model_.mig_reservations.begin(), model_.mig_reservations.end(), reservation) ==
          model_.mig_reservations.end())
        spdlog::info("MIG: memory slices {}+{} of GPU {} kept for container {} ({})",
                     reservation.placement.start, reservation.placement.size,
                     reservation.pci_address, reservation.id, reservation.profile);
    model_.mig_reservations = std::move(decision.reservations);
    // Slices a reservation no longer keeps may be placed now.
    model_.reschedule = true;
    model_.scheduler_wake.notify_all();
  }
  model_.mig_demand_notes = std::move(decision.notes);
  model_.QueueChanged();
  if (!decision.step) return std::nullopt;
  Change change{snapshot.gpus[decision.step->gpu].pci_address, decision.step_for,
                std::move(decision.step->step), decided};
  if (!StillHoldsLocked(change)) {
    // Something changed meanwhile: decide again.
    model_.mig_demand_due = true;
    return std::nullopt;
  }
  model_.mig_reshaping.insert(change.pci_address);
  return change;
}

void MigDemand::FinishLocked(const Change& change, const MigShaper::Outcome& outcome) {
  model_.mig_reshaping.erase(change.pci_address);
  if (outcome.refused)
    refused_[{change.pci_address, *outcome.refused}] = Clock::now() + kRefusedFor;
  if (outcome.instances) model_.mig_instances[change.pci_address] = *outcome.instances;
  fleet::GpuRecord* gpu = nullptr;
  for (auto& candidate : model_.gpus)
    if (candidate.pci_address == change.pci_address && candidate.node.empty()) gpu = &candidate;
  if (gpu && outcome.slices) {
    MergeSlices(*gpu, *outcome.slices);
    model_.MarkLeasesChanged();
  }
  std::string detail = StepText(change.step) + " for container " + change.for_container;
  if (outcome.created) detail += fmt::format(": GI {} {}", *outcome.created, outcome.created_uuid);
  if (!outcome.status) detail += ": failed: " + outcome.status.error().message;
  if (outcome.status)
    spdlog::info("MIG: GPU {}: {} (decided in {} us)", change.pci_address, detail,
                 change.decided.count());
  else
    spdlog::warn("MIG: GPU {}: {}", change.pci_address, detail);
  std::vector<fleet::Mutation> audit;
  audit.push_back(
      ServiceAudit({"gpu.mig_reshape", "gpu", gpu ? gpu->id() : change.pci_address, ""}, detail));
  model_.Commit(std::move(audit), nullptr);
  if (outcome.created) promised_[{change.pci_address, *outcome.created}] = change.for_container;
  // The next decision follows the placement pass that sees the change (passes meanwhile saw the
  // GPU being changed).
  model_.mig_demand_due = false;
  model_.reschedule = true;
  model_.scheduler_wake.notify_all();
}

void MigDemand::Loop() {
  ReadInstances();
  std::unique_lock lock(model_.mu);
  while (!stopping_) {
    model_.mig_demand_wake.wait(lock, [this] { return stopping_ || model_.mig_demand_due; });
    if (stopping_) break;
    model_.mig_demand_due = false;
    Snapshot snapshot = SnapshotLocked();
    lock.unlock();
    const auto began = Clock::now();
    MigDemandDecision decision =
        DecideMigDemand(snapshot.gpus, snapshot.wants, snapshot.held, kMaxMigReservations);
    const auto decided =
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - began);
    lock.lock();
    std::optional<Change> change = AdoptLocked(snapshot, std::move(decision), decided);
    if (!change) continue;
    spdlog::info("MIG: GPU {}: {} for container {}", change->pci_address, StepText(change->step),
                 change->for_container);
    lock.unlock();
    MigShaper::Outcome outcome = shaper_->Apply(change->pci_address, change->step);
    lock.lock();
    FinishLocked(*change, outcome);
    if (!outcome.status)
      model_.mig_demand_wake.wait_for(lock, kFailedBackoff, [this] { return stopping_; });
  }
}

}  // namespace tessera::serve

#include "serve/faults.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/strict_json.h"
#include "serve/audit.h"
#include "serve/record_names.h"

namespace tessera::serve {

Faults::Faults(Model& model, Submissions& submissions, FaultMetrics& metrics)
    : model_(model),
      submissions_(submissions),
      metrics_(metrics),
      policy_(model.options.faults.policy),
      classifier_(
          model.options.faults.table ? *model.options.faults.table : health::XidTable::Default(),
          model.options.faults.classifier) {
  // This host's GPUs return through the firmware check; the fleet's are checked on their node.
  policy_.firmware_step = !model.options.fleet;
}

namespace {

// The containers (not ended) that hold any part of `gpu`, with the GPU instance of each
// (kWholeGpu: the whole GPU or a share).
std::vector<std::pair<ContainerRecord*, uint32_t>> HoldersOf(Model& model, const GpuRecord& gpu) {
  std::vector<std::pair<ContainerRecord*, uint32_t>> out;
  auto add = [&](const std::string& id, uint32_t instance) {
    auto it = model.containers.find(id);
    if (id.empty() || it == model.containers.end() || fleet::IsTerminal(it->second.state)) return;
    for (const auto& [held, _] : out)
      if (held == &it->second) return;
    out.emplace_back(&it->second, instance);
  };
  for (const auto& slice : gpu.mig_slices)
    add(slice.container_id, slice.gpu_instance_id);
  for (const auto& share : gpu.shares) {
    // A share of a MIG slice is in that slice's GPU instance, as the slice's other holders.
    uint32_t instance = health::kWholeGpu;
    for (const auto& slice : gpu.mig_slices)
      if (!share.mig_device.empty() && slice.id == share.mig_device)
        instance = slice.gpu_instance_id;
    add(share.container_id, instance);
  }
  if (!gpu.mig_enabled && gpu.shares.empty()) add(gpu.container_id, health::kWholeGpu);
  return out;
}

// The holders one MIG instance reaches (all of them when no instance is named or the GPU is
// not in MIG mode).
std::vector<ContainerRecord*> OfInstance(Model& model, const GpuRecord& gpu, uint32_t instance) {
  std::vector<ContainerRecord*> out;
  const bool by_instance = gpu.mig_enabled && instance != health::kWholeGpu;
  for (const auto& [container, held] : HoldersOf(model, gpu))
    if (!by_instance || held == instance) out.push_back(container);
  return out;
}

}  // namespace

bool Faults::HeldLocked(const GpuRecord& gpu) const {
  return !HoldersOf(model_, gpu).empty();
}

std::vector<ContainerRecord*> Faults::ReachedLocked(const GpuRecord& gpu,
                                                    const health::Decision& decision) {
  switch (decision.reach) {
    case health::Reach::kNothing:
      // An application fault reaches nobody's work, but its holders are told.
      return decision.fault_class == health::FaultClass::kApplication
                 ? OfInstance(model_, gpu, decision.gpu_instance_id)
                 : std::vector<ContainerRecord*>{};
    case health::Reach::kInstance:
      return OfInstance(model_, gpu, decision.gpu_instance_id);
    case health::Reach::kGpu:
      return OfInstance(model_, gpu, health::kWholeGpu);
  }
  return {};
}

void Faults::OnSignal(const health::Signal& signal) {
  std::lock_guard lock(model_.mu);
  GpuRecord* gpu = model_.FindGpu(signal.gpu);
  if (!gpu) {
    spdlog::warn("GPU fault on {}: not a GPU of this service", signal.gpu);
    return;
  }
  std::vector<std::string> tenancies;
  for (const auto* holder : OfInstance(model_, *gpu, signal.gpu_instance_id))
    tenancies.push_back(holder->spec.tenancy);
  const health::Decision decision = classifier_.Classify(signal, tenancies);
  metrics_.Fault(gpu->id(), signal.xid, decision.action);
  if (decision.fault_class == health::FaultClass::kIgnore) {
    spdlog::info("GPU {}: {} (Xid {}): logged only", gpu->id(), health::SignalKindName(signal.kind),
                 signal.xid);
    return;
  }
  const int64_t now_ms = fleet::NowMs();
  const int64_t at_ms = signal.at_ms > 0 ? std::min(signal.at_ms, now_ms) : now_ms;
  spdlog::warn("GPU {}: {} ({}, {})", gpu->id(), decision.reason, decision.action,
               health::ReachName(decision.reach));
  std::vector<Mutation> out;
  std::vector<std::string> requeued;
  health::RecordFault(gpu->health, signal, decision, policy_, now_ms);
  ContainLocked(*gpu, decision, at_ms, out, requeued);
  if (!gpu->health.in_service() && gpu->state != LeaseState::kFaulted)
    model_.SetGpuState(*gpu, LeaseState::kFaulted, gpu->health.reason, out);
  else
    out.push_back(*gpu);
  out.push_back(
      ServiceAudit({"gpu.fault", "gpu", gpu->id(), ""}, decision.action + ": " + decision.reason));
  CommitLocked(std::move(out), std::move(requeued));
}

void Faults::CommitLocked(std::vector<Mutation> out, std::vector<std::string> requeued) {
  model_.QueueChanged();
  if (requeued.empty()) {
    model_.Commit(std::move(out), nullptr);
  } else {
    model_.Commit(std::move(out), [this, requeued = std::move(requeued)](const Status&) {
      // Written or kept to write again (Model::Commit): either way the requests wait again.
      submissions_.AdmitResubmitted(requeued);
    });
  }
  model_.recovery_wake.notify_all();
  model_.scheduler_wake.notify_one();
}

void Faults::ContainLocked(GpuRecord& gpu, const health::Decision& decision, int64_t at_ms,
                           std::vector<Mutation>& out, std::vector<std::string>& requeued) {
  for (ContainerRecord* container : ReachedLocked(gpu, decision)) {
    if (decision.reach == health::Reach::kNothing) {
      // Told, not stopped: the reason stays on its record (and its end's).
      spdlog::warn("container {}: {}", container->id, decision.reason);
      container->reason = decision.reason;
      out.push_back(
          ServiceAudit({"container.gpu-fault", "container", container->id, container->spec.tenancy},
                       decision.reason));
      out.push_back(*container);
      continue;
    }
    if (container->stop_requested) continue;
    if (container->started) model_.fault_ends[container->id] = at_ms;
    model_.StopContainer(*container, decision.reason, out);
    RequeueLocked(*container, out, requeued);
  }
}

void Faults::RequeueLocked(ContainerRecord& stopped, std::vector<Mutation>& out,
                           std::vector<std::string>& requeued) {
  auto tenancy = model_.tenancies.find(stopped.spec.tenancy);
  if (tenancy == model_.tenancies.end() || tenancy->second.uid != stopped.tenancy_uid ||
      !RequeuesOnGpuFault(tenancy->second))
    return;
  auto id = submissions_.ResubmitLocked(stopped, out);
  if (!id) {
    spdlog::error("container {}: not queued again: {}", stopped.id, id.error().message);
    return;
  }
  stopped.reason += "; queued again as " + *id;
  out.push_back(stopped);
  requeued.push_back(*id);
}

bool Faults::FirmwareCheckedLocked(GpuRecord& gpu, bool passed, const std::string& reason,
                                   std::vector<Mutation>& out) {
  if (gpu.health.step != health::RecoveryStep::kFirmware) return false;
  const int64_t now_ms = fleet::NowMs();
  const int64_t faulted_ms = gpu.health.faulted_ms;
  health::Advance(gpu.health, passed, passed ? "" : reason, policy_, now_ms);
  if (gpu.health.in_service()) {
    model_.SetGpuState(gpu, LeaseState::kFree, "", out);
    if (faulted_ms > 0)
      metrics_.Recovered(gpu.id(), static_cast<double>(now_ms - faulted_ms) / 1000.0);
    spdlog::info("GPU {}: recovered; back in service", gpu.id());
  } else {
    model_.SetGpuState(gpu, LeaseState::kFaulted, gpu.health.reason, out);
    model_.recovery_wake.notify_all();
  }
  return true;
}

Status Faults::ReleaseLocked(GpuRecord& gpu, std::vector<Mutation>& out) {
  if (HeldLocked(gpu))
    return FailedPrecondition("GPU " + gpu.id() +
                              " is faulted and a container still holds it; it is released once "
                              "its containers have ended");
  health::Release(gpu.health, fleet::NowMs());
  gpu.drain_requested = gpu.quarantine_requested = false;
  model_.SetGpuState(gpu, LeaseState::kFree, "", out);
  model_.reschedule = true;
  return Ok();
}

void Faults::ApplyPublishedLocked(GpuRecord& gpu, const health::GpuHealth& published,
                                  std::vector<Mutation>& out, std::vector<std::string>& requeued) {
  if (published == gpu.health) return;
  const int64_t faulted_ms = gpu.health.faulted_ms;
  gpu.health = published;
  if (!published.in_service() && gpu.state != LeaseState::kFaulted) {
    // Its node took it out: every container on it stops (the fleet places whole GPUs).
    health::Decision decision;
    decision.reach = health::Reach::kGpu;
    decision.reason = published.reason;
    decision.action = "stop-gpu";
    uint64_t xid = 0;
    if (!published.history.empty()) {
      xid = published.history.back().xid;
      decision.action = published.history.back().action;
    }
    metrics_.Fault(gpu.id(), xid, decision.action);
    spdlog::warn("GPU {}: its node reports it faulted: {}", gpu.id(), published.reason);
    ContainLocked(gpu, decision, published.faulted_ms > 0 ? published.faulted_ms : fleet::NowMs(),
                  out, requeued);
    model_.SetGpuState(gpu, LeaseState::kFaulted, published.reason, out);
    return;
  }
  if (published.in_service() && gpu.state == LeaseState::kFaulted) {
    // Recovered on its node (reset, verified, self-tested there): free again.
    if (faulted_ms > 0)
      metrics_.Recovered(gpu.id(), static_cast<double>(fleet::NowMs() - faulted_ms) / 1000.0);
    model_.SetGpuState(gpu, LeaseState::kFree, "", out);
    model_.reschedule = true;
    return;
  }
  out.push_back(gpu);
}

std::string FaultPolicyToJson(bool requeue_on_gpu_fault) {
  return nlohmann::json{{"requeueOnGpuFault", requeue_on_gpu_fault}}.dump();
}

Result<bool> ParseFaultPolicy(std::string_view json_text) {
  auto parsed = ParseStrictJson(json_text, "fault policy");
  if (!parsed) return parsed.error();
  if (!parsed->is_object()) return InvalidArgument("fault policy: must be a JSON object");
  bool requeue = false;
  for (const auto& [key, value] : parsed->items()) {
    if (key != "requeueOnGpuFault")
      return InvalidArgument("fault policy: unknown field (requeueOnGpuFault)");
    if (!value.is_boolean()) return InvalidArgument("requeueOnGpuFault: must be true or false");
    requeue = value.get<bool>();
  }
  return requeue;
}

bool RequeuesOnGpuFault(const fleet::Tenancy& record) {
  auto it = record.extensions.find(std::string(kFaultPolicyExtension));
  if (it == record.extensions.end()) return false;
  auto parsed = ParseFaultPolicy(it->second);
  return parsed && *parsed;
}

}  // namespace tessera::serve

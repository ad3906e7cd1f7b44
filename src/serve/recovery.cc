#include "serve/recovery.h"

#include <spdlog/spdlog.h>

#include "serve/record_names.h"

namespace tessera::serve {

using health::RecoveryStep;

Recovery::Recovery(Model& model, Faults& faults) : model_(model), faults_(faults) {}

Recovery::~Recovery() {
  Stop();
}

void Recovery::SetIo(std::unique_ptr<RecoveryIo> io) {
  std::lock_guard lock(model_.mu);
  io_ = std::move(io);
}

void Recovery::Start() {
  std::lock_guard lock(model_.mu);
  if (thread_.joinable()) return;
  stopping_ = false;
  thread_ = std::thread([this] { Loop(); });
}

void Recovery::Stop() {
  {
    std::lock_guard lock(model_.mu);
    stopping_ = true;
  }
  model_.recovery_wake.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Recovery::Loop() {
  std::unique_lock lock(model_.mu);
  while (!stopping_) {
    // Every GPU with a step due takes one step per round; a round that moved none waits for a
    // change (a fault, a container's end, a step written) or, while a GPU waits to drain, for
    // the next look.
    bool moved = false, waiting = false;
    std::vector<std::string> due;
    for (const auto& gpu : model_.gpus)
      if (gpu.node.empty() && gpu.state == LeaseState::kFaulted && !gpu.health.in_service() &&
          gpu.health.step != RecoveryStep::kOut)
        due.push_back(gpu.id());
    for (const auto& id : due) {
      if (stopping_) break;
      if (unwritten_.count(id)) {
        waiting = true;
        continue;
      }
      if (StepLocked(lock, id))
        moved = true;
      else
        waiting = true;
    }
    if (stopping_ || moved) continue;
    if (waiting)
      model_.recovery_wake.wait_for(lock, model_.options.faults.drain_poll);
    else
      model_.recovery_wake.wait(lock);
  }
}

bool Recovery::StepLocked(std::unique_lock<std::mutex>& lock, const std::string& id) {
  GpuRecord* gpu = model_.FindGpu(id);
  if (!gpu || gpu->state != LeaseState::kFaulted) return false;
  const RecoveryStep step = gpu->health.step;
  if (step == RecoveryStep::kDraining && faults_.HeldLocked(*gpu)) return false;
  if (step == RecoveryStep::kFirmware) {
    // The lease flow's check decides; Faults::FirmwareCheckedLocked takes its verdict.
    std::vector<Mutation> out;
    model_.SetGpuState(*gpu, LeaseState::kReleasing, "recovered; firmware check next", out);
    model_.to_check.push_back(id);
    model_.Commit(std::move(out), nullptr);
    model_.checker_wake.notify_one();
    return true;
  }
  if (!io_) return false;
  const int attempts = gpu->health.attempts;
  const GpuRecord snapshot = *gpu;
  model_.busy++;
  lock.unlock();
  const Outcome outcome = Run(step, snapshot);
  lock.lock();
  model_.busy--;
  model_.idle.notify_all();
  gpu = model_.FindGpu(id);
  if (!gpu || outcome.wait) return false;
  ApplyLocked(*gpu, step, attempts, outcome);
  return true;
}

Recovery::Outcome Recovery::Run(RecoveryStep step, const GpuRecord& gpu) {
  Outcome outcome;
  switch (step) {
    case RecoveryStep::kDraining: {
      // A shared GPU's MPS daemon holds it open: it goes first (no share is left on it).
      if (model_.unshare && gpu.memory_bytes > 0 && !gpu.mig_enabled)
        if (auto status = model_.unshare(gpu); !status)
          spdlog::warn("GPU {}: sharing teardown: {}", gpu.id(), status.error().message);
      const health::GpuState state = io_->ReadState(gpu);
      // A GPU off the bus runs nothing; one whose processes cannot be counted is waited for.
      outcome.wait = !state.lost && state.processes.value_or(1) != 0;
      outcome.passed = !outcome.wait;
      return outcome;
    }
    case RecoveryStep::kResetting: {
      spdlog::info("GPU {}: reset (attempt {})", gpu.id(), gpu.health.attempts + 1);
      const Status reset = io_->Reset(gpu);
      outcome.passed = static_cast<bool>(reset);
      if (!reset) outcome.detail = "reset: " + reset.error().message;
      return outcome;
    }
    case RecoveryStep::kVerifying: {
      const auto unfit = health::JudgeState(io_->ReadState(gpu));
      outcome.passed = !unfit;
      if (unfit) {
        outcome.detail = "verification: " + unfit->reason;
        outcome.reset_helps = unfit->reset_helps;
      }
      return outcome;
    }
    case RecoveryStep::kSelfTest: {
      const auto verdict = io_->SelfTest(gpu);
      outcome.passed = !verdict || verdict->passed;
      if (verdict && !verdict->passed) outcome.detail = "self-test: " + verdict->reason;
      return outcome;
    }
    default:
      outcome.wait = true;
      return outcome;
  }
}

void Recovery::ApplyLocked(GpuRecord& gpu, RecoveryStep step, int attempts,
                           const Outcome& outcome) {
  if (gpu.state != LeaseState::kFaulted || gpu.health.step != step ||
      gpu.health.attempts != attempts) {
    // A fault came meanwhile and started recovery over: this outcome is no longer the GPU's.
    spdlog::info("GPU {}: {} interrupted by a fault; its outcome is dropped", gpu.id(),
                 health::RecoveryStepName(step));
    return;
  }
  const int64_t now_ms = fleet::NowMs();
  // Remap failure, or the driver asks for a node reboot: no reset is tried again.
  health::Advance(gpu.health, outcome.passed, outcome.detail, faults_.policy(), now_ms,
                  outcome.reset_helps);
  if (outcome.passed)
    spdlog::info("GPU {}: {} passed; next: {}", gpu.id(), health::RecoveryStepName(step),
                 health::RecoveryStepName(gpu.health.step));
  else
    spdlog::warn("GPU {}: {} failed ({}); next: {}", gpu.id(), health::RecoveryStepName(step),
                 outcome.detail, health::RecoveryStepName(gpu.health.step));
  if (gpu.health.step == RecoveryStep::kOut) gpu.reason = gpu.health.reason;
  gpu.updated_ms = now_ms;
  model_.MarkLeasesChanged();
  // The next step runs once this one's record is durable: a restart resumes there.
  const std::string id = gpu.id();
  unwritten_.insert(id);
  model_.Commit({gpu}, [this, id](const Status& status) {
    std::lock_guard lock(model_.mu);
    if (!status) spdlog::warn("GPU {}: recovery step not written: {}", id, status.error().message);
    unwritten_.erase(id);
    model_.recovery_wake.notify_all();
  });
}

}  // namespace tessera::serve

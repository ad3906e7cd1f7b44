#include "serve/checker.h"

#include <spdlog/spdlog.h>

#include "firmware/firmware.h"
#include "process/process.h"

namespace tessera::serve {

using fleet::GpuRecord;
using fleet::LeaseState;
using fleet::Mutation;

FirmwareChecker::FirmwareChecker(Model& model, backends::ContainerBackend& backend,
                                 SharedGpus& shared)
    : model_(model), backend_(backend), shared_(shared) {}

FirmwareChecker::~FirmwareChecker() {
  Stop();
}

void FirmwareChecker::Start() {
  std::lock_guard lock(model_.mu);
  if (thread_.joinable()) return;
  stopping_ = false;
  thread_ = std::thread([this] { Loop(); });
}

void FirmwareChecker::Stop() {
  {
    std::lock_guard lock(model_.mu);
    stopping_ = true;
  }
  model_.checker_wake.notify_all();
  if (thread_.joinable()) thread_.join();
}

void FirmwareChecker::Loop() {
  std::unique_lock lock(model_.mu);
  while (!stopping_) {
    model_.checker_wake.wait(lock, [this] { return stopping_ || !model_.to_check.empty(); });
    if (stopping_) break;
    std::string pci = std::move(model_.to_check.front());
    model_.to_check.pop_front();
    auto* gpu = model_.FindGpu(pci);
    if (!gpu || (gpu->state != LeaseState::kReleasing && gpu->state != LeaseState::kChecking))
      continue;
    std::vector<Mutation> mutations;
    if (gpu->state == LeaseState::kReleasing)
      model_.SetGpuState(*gpu, LeaseState::kChecking, "firmware check running", mutations);
    model_.Commit(std::move(mutations), nullptr);
    mutations.clear();
    GpuRecord snapshot = *gpu;
    model_.busy++;
    lock.unlock();
    // A GPU that was shared: its MPS daemon is torn down (compute mode back) before the check.
    Status unshared = snapshot.node.empty() ? shared_.Release(snapshot) : Ok();
    auto [passed, reason] = unshared ? RunFirmwareCheck(snapshot)
                                     : std::pair<bool, std::string>{
                                           false, "sharing teardown: " + unshared.error().message};
    lock.lock();
    model_.busy--;
    gpu = model_.FindGpu(pci);
    if (!gpu || gpu->state != LeaseState::kChecking) continue;
    if (model_.firmware_checked && model_.firmware_checked(*gpu, passed, reason, mutations)) {
      // A GPU at the end of its recovery from a fault: its health record decides.
    } else if (!passed) {
      model_.SetGpuState(*gpu, LeaseState::kQuarantined, reason, mutations);
    } else if (gpu->quarantine_requested) {
      model_.SetGpuState(*gpu, LeaseState::kQuarantined, "quarantined by an operator", mutations);
    } else if (gpu->drain_requested) {
      model_.SetGpuState(*gpu, LeaseState::kDraining, "drained by an operator", mutations);
    } else {
      model_.SetGpuState(*gpu, LeaseState::kFree, "", mutations);
    }
    gpu->quarantine_requested = false;
    gpu->drain_requested = false;
    mutations.back() = *gpu;
    model_.reschedule = true;
    model_.Commit(std::move(mutations), nullptr);
    model_.scheduler_wake.notify_one();
    model_.idle.notify_all();
  }
}

std::pair<bool, std::string> FirmwareChecker::RunFirmwareCheck(const GpuRecord& gpu) const {
  if (!gpu.node.empty()) {
    // On another node: the backend checks it there.
    auto verdict = backend_.AwaitGpuCheck(gpu.container_id, model_.options.firmware.timeout);
    if (!verdict) return {false, "firmware check: " + verdict.error().message};
    return {verdict->passed, verdict->reason};
  }
  std::string program = model_.options.firmware.command;
  if (auto it = model_.options.firmware.per_gpu.find(gpu.pci_address);
      it != model_.options.firmware.per_gpu.end())
    program = it->second;
  if (!program.empty()) {
    std::vector<std::string> argv;
    size_t start = 0;
    while (start < program.size()) {
      size_t end = program.find(' ', start);
      if (end == std::string::npos) end = program.size();
      if (end > start) argv.push_back(program.substr(start, end - start));
      start = end + 1;
    }
    argv.push_back(gpu.pci_address);
    process::Options run;
    run.timeout_ms = static_cast<int>(model_.options.firmware.timeout.count());
    run.max_output = 4096;
    auto outcome = process::Run(argv, run);
    if (!outcome) return {false, "firmware check: " + outcome.error().message};
    std::string output = outcome->output;
    while (!output.empty() && (output.back() == '\n' || output.back() == ' '))
      output.pop_back();
    if (outcome->timed_out)
      return {false, "firmware check " + process::Describe(argv) + " timed out after " +
                         std::to_string(model_.options.firmware.timeout.count()) + " ms"};
    if (outcome->status != 0)
      return {false, "firmware check " + process::Describe(argv) + " exited with status " +
                         std::to_string(outcome->status) + (output.empty() ? "" : ": " + output)};
    return {true, ""};
  }
  auto digest = firmware::HashOptionRom(model_.options.root, gpu.pci_address);
  if (!digest)
    return {false, "firmware check: cannot read the option ROM: " + digest.error().message};
  auto verdict = firmware::CompareWithBaseline(gpu.firmware_baseline, *digest);
  if (!verdict.passed) return {false, "firmware check: " + verdict.reason};
  return {true, ""};
}

}  // namespace tessera::serve

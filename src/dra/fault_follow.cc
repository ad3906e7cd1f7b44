// Following the node agent's recovery (recover off): its published health of each GPU clears the
// taints of the GPUs it repaired and taints the faults it saw first.
#include <algorithm>
#include <cctype>

#include "dra/faults.h"

namespace tessera::dra {
namespace {

// The taint's value for the node agent's newest fault: "xid-79", or its signal's name ("gpu-lost")
// as a label value (the annotation is anyone's who may edit Nodes).
std::string FollowedTaintValue(const health::GpuHealth& published) {
  if (published.history.empty()) return "fault";
  const health::FaultEntry& last = published.history.back();
  if (last.xid > 0) return "xid-" + std::to_string(last.xid);
  std::string value;
  for (char c : last.signal) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_') value += c;
  }
  if (value.size() > 63) value.resize(63);
  while (!value.empty() && !std::isalnum(static_cast<unsigned char>(value.back())))
    value.pop_back();
  while (!value.empty() && !std::isalnum(static_cast<unsigned char>(value.front())))
    value.erase(value.begin());
  return value.empty() ? "fault" : value;
}

}  // namespace

bool FaultHandler::FollowHealthyLocked(Gpu& gpu, const health::GpuHealth& published,
                                       int64_t now_ms) {
  // A stale annotation (healthy since before this fault) says nothing about this fault.
  if (gpu.health.in_service() || published.step_since_ms < gpu.health.faulted_ms) return false;
  health::GpuHealth before = gpu.health;
  gpu.health.step = health::RecoveryStep::kHealthy;
  gpu.health.reason.clear();
  gpu.health.attempts = 0;
  gpu.health.faulted_ms = 0;
  gpu.health.step_since_ms = std::max(published.step_since_ms, now_ms);
  ++gpu.changes;
  // Untainted only once the file says so; a failed write keeps the taint, to follow again.
  if (hooks_.persist && !hooks_.persist(SnapshotLocked())) {
    gpu.health = std::move(before);
    return false;
  }
  return true;
}

bool FaultHandler::FollowFaultLocked(const std::string& pci, const health::GpuHealth& published) {
  auto it = gpus_.find(pci);
  if (it != gpus_.end()) {
    const health::GpuHealth& known = it->second.health;
    // Tainted already, or back in service here since that fault (the annotation is stale).
    if (!known.in_service() || known.step_since_ms > published.faulted_ms) return false;
  }
  Gpu& gpu = gpus_[pci];
  gpu.health = published;
  // The node agent resets the GPU: its work stops either way.
  gpu.fault = DeviceFault{FollowedTaintValue(published), TaintEffect::kNoExecute,
                          published.faulted_ms / 1000, std::nullopt,
                          "gpu-fault: " + published.reason + " on " + pci};
  ++gpu.changes;
  // A failed write keeps the taint in memory all the same: out of service is the safe side.
  if (hooks_.persist) (void)hooks_.persist(SnapshotLocked());
  return true;
}

bool FaultHandler::Follow(const std::map<std::string, health::GpuHealth>& published,
                          int64_t now_ms) {
  std::lock_guard lock(mu_);
  bool changed = false;
  for (const auto& [pci, record] : published) {
    if (record.in_service()) {
      auto it = gpus_.find(pci);
      if (it != gpus_.end() && FollowHealthyLocked(it->second, record, now_ms)) changed = true;
    } else if (FollowFaultLocked(pci, record)) {
      changed = true;
    }
  }
  return changed;
}

}  // namespace tessera::dra

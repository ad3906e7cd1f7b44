// GPU faults on this node (private to src/nodeagent): a health::Monitor watches the node's GPUs,
// the Classifier decides what each signal touches, and a faulted GPU goes through recovery —
// once kubelet's allocations (PodResources) show no Pod holds it and NVML shows no process on
// it: reset (--gpu-reset-command, with the monitor's NVML handles closed), verify the NVML state,
// self-test (--gpu-self-test-command), back in service. Every change of a GPU's health is
// written to --gpu-health-state and published with the node's GPUs at once, so the control
// plane stops the GPU's work and keeps it out of placement; a restarted agent resumes from the
// state file (or, without one, from what its Node publishes).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "backends/kubernetes/node_gpus.h"
#include "health/health.h"
#include "kubernetes/client.h"
#include "nodeagent/agent_loops.h"
#include "nodeagent/lease_sync_options.h"

namespace tessera::nodeagent {

// Each GPU's health by PCI address, shared by the recovery and the publisher; every change is
// kept in the state file and wakes the publisher.
class NodeHealth {
 public:
  explicit NodeHealth(std::string state_file) : state_file_(std::move(state_file)) {}

  // Reads the state file; false when there is none (or it cannot be read: said on stderr).
  bool Load();
  // Takes the health published on the Node (for a restart that lost its state file).
  void Adopt(const k8s::NodeGpus& published);

  std::map<std::string, health::GpuHealth> Snapshot(uint64_t* version = nullptr);
  health::GpuHealth Of(const std::string& pci);
  // Stores `health` (a change: written to the state file, the publisher woken).
  void Set(const std::string& pci, const health::GpuHealth& health);
  // Waits until the version differs from `seen`, `stop` is set or `wait` has passed.
  void WaitForChange(uint64_t seen, std::chrono::milliseconds wait, const std::atomic<bool>& stop);
  // The GPUs of `gpus` with their health filled in.
  void Fill(k8s::NodeGpus& gpus);

 private:
  void SaveLocked();

  const std::string state_file_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, health::GpuHealth> gpus_;  // guarded by mu_
  uint64_t version_ = 0;                           // guarded by mu_
};

// The state file's text and back (pure): {"version":1,"gpus":{"<pci>":<health>}}.
std::string NodeHealthStateText(const std::map<std::string, health::GpuHealth>& gpus);
Result<std::map<std::string, health::GpuHealth>> ParseNodeHealthState(std::string_view text);

// Detection and recovery, running until destroyed.
class GpuRecovery {
 public:
  virtual ~GpuRecovery() = default;
};

// The agent's other NVML users (telemetry): called with true before a reset, to close NVML
// (the driver refuses a reset while any process holds it), and with false after it.
using ReleaseNvml = std::function<void(bool release)>;

// Starts detection and recovery on this node's GPUs (`gpus`). nullptr when --no-gpu-health, or
// when nothing can watch them (said on stderr): the health loaded into `board` is still
// published. An error for a bad --fault-table.
Result<std::unique_ptr<GpuRecovery>> StartGpuRecovery(const LeaseSyncOptions& options,
                                                      const k8s::NodeGpus& gpus, NodeHealth& board,
                                                      NodeLeases& leases, ReleaseNvml release_nvml);

}  // namespace tessera::nodeagent

// Watching GPUs for faults and running the recovery commands: the I/O beside the health
// module's pure decisions. The Monitor reads NVML (events as they arrive, state between them) and
// sysfs for GPUs no driver holds (VFIO, Kata); the commands reset a GPU and run its self-test.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "health/health.h"

namespace tessera::health {

// ---- Reads (monitor.cc) ----

struct WatchedGpu {
  std::string pci_address;                  // sysfs form
  std::string uuid;                         // NVML's "GPU-…" (empty where unknown)
  bool nvidia_driver = true;                // false: VFIO or no driver; watched through sysfs only
  std::vector<uint32_t> mig_gpu_instances;  // informational
};

struct MonitorOptions {
  std::string nvml_library = "libnvidia-ml.so.1";
  std::string root = "/";  // sysfs lives under it (fixture trees in tests)
  // How long one wait for NVML events blocks: the stop latency of the watcher thread, not the
  // detection latency (an event wakes the wait at once).
  std::chrono::milliseconds event_wait{500};
  // How often NVML state and sysfs counters are read between events.
  std::chrono::milliseconds poll_interval{5000};
};

// Watches GPUs on its own thread and hands each Signal to the sink (on that thread).
class Monitor {
 public:
  using Sink = std::function<void(Signal)>;
  // Unavailable when neither NVML nor sysfs can watch any of `gpus` (the caller warns and runs
  // without health). NVML missing is not an error when sysfs-only GPUs remain.
  static Result<std::unique_ptr<Monitor>> Start(MonitorOptions options,
                                                std::vector<WatchedGpu> gpus, Sink sink);
  virtual ~Monitor() = default;
  // The GPU's NVML state now (a GPU without the driver: lost when its config space reads all
  // ones or its directory is gone).
  virtual GpuState ReadState(const std::string& pci_address) = 0;
  // Closes NVML (no handle held, so a reset is not refused as "in use") until Resume().
  virtual void Suspend() = 0;
  virtual void Resume() = 0;
};

// ---- Commands (recoverer.cc) ----

struct RecoveryCommands {
  // argv; "{uuid}", "{pci}" and "{index}" are replaced. Empty reset: recovery never resets
  // (the GPU stays out after its fault).
  std::vector<std::string> reset = {"nvidia-smi", "-r", "-i", "{uuid}"};
  // Empty: no active self-test (verification by NVML state only). "dcgmi" as argv[0] reads the
  // output as `dcgmi diag` output.
  std::vector<std::string> self_test;
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
};

// A command flag's text as argv: its words, split at whitespace (no shell, no quoting), so
// "nvidia-smi -r -i {uuid}" is four words. Empty text: no command.
std::vector<std::string> CommandWords(std::string_view text);

// Runs one command of `commands` for `gpu` (its exit status judged; output bounded).
Status RunReset(const RecoveryCommands& commands, const WatchedGpu& gpu, int index);
SelfTestVerdict RunSelfTest(const RecoveryCommands& commands, const WatchedGpu& gpu, int index);

}  // namespace tessera::health

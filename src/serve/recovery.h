// Recovery of this host's faulted GPUs (leader only, a thread of its own like the firmware
// checker): each faulted GPU goes through its health record's steps, every step written to the
// store before it runs, so a restart resumes where it was (docs/faults.md):
//   draining   until no container holds the GPU and NVML counts no process on it
//   resetting  the reset command, with nothing of this service holding the GPU open
//   verifying  NVML state: no remap pending, no remap failure, recovery action none
//   self-test  the active self-test (passes at once when none is configured)
//   firmware   the lease flow's firmware check (releasing, the checker); on a pass it is free
// A failed step counts an attempt (health::Advance); a GPU out of attempts, or taken out too
// often in the policy's window, stays out until an operator releases it. A fault on the way
// starts over from draining (health::RecordFault), and the outcome of the step it interrupted
// is dropped.
#pragma once

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "common/error.h"
#include "fleet/fleet.h"
#include "health/health.h"
#include "serve/faults.h"
#include "serve/model.h"

namespace tessera::serve {

// What recovery reads and runs on this host: tessera-serve's health monitor and commands; test
// doubles in tests. Called without the model's mutex, from the recovery thread only.
class RecoveryIo {
 public:
  virtual ~RecoveryIo() = default;
  virtual health::GpuState ReadState(const fleet::GpuRecord& gpu) = 0;
  // Resets the GPU with nothing of the service holding it open (the monitor's and telemetry's
  // NVML closed meanwhile).
  virtual Status Reset(const fleet::GpuRecord& gpu) = 0;
  // nullopt: no self-test is configured.
  virtual std::optional<health::SelfTestVerdict> SelfTest(const fleet::GpuRecord& gpu) = 0;
};

class Recovery {
 public:
  Recovery(Model& model, Faults& faults);
  ~Recovery();
  Recovery(const Recovery&) = delete;
  Recovery& operator=(const Recovery&) = delete;

  // Before Start: without it, faulted GPUs wait in their step (nothing can reset them here).
  void SetIo(std::unique_ptr<RecoveryIo> io);
  void Start();
  void Stop();  // after the step under way, if any, returned

 private:
  void Loop();
  // mu held: the next faulted GPU of this host with a step to run now, by ID; "" when none.
  std::string NextLocked() const;
  // One step of GPU `id`; takes mu back before returning. False when nothing could be done
  // (it waits for its containers or processes).
  bool StepLocked(std::unique_lock<std::mutex>& lock, const std::string& id);
  // The step's I/O without mu: pass/fail, the detail, and whether a reset can still help.
  struct Outcome {
    bool passed = false;
    std::string detail;
    bool reset_helps = true;
    bool wait = false;  // draining: not empty yet
  };
  Outcome Run(health::RecoveryStep step, const fleet::GpuRecord& gpu);
  // mu held: the outcome reaches the record (unless a fault moved it meanwhile), then the store.
  void ApplyLocked(fleet::GpuRecord& gpu, health::RecoveryStep step, int attempts,
                   const Outcome& outcome);

  Model& model_;
  Faults& faults_;
  std::unique_ptr<RecoveryIo> io_;
  bool stopping_ = false;  // guarded by model_.mu
  // GPUs whose last step's record the store has not yet confirmed (guarded by model_.mu).
  std::set<std::string> unwritten_;
  std::thread thread_;
};

}  // namespace tessera::serve

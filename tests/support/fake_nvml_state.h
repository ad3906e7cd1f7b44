// The stand-in NVML's state for one test (tests/deviceplugin/fake_nvml_mig.c): a private copy of
// a fixture host's <name>.nvml, named by TESSERA_FAKE_NVML_STATE, and a log of every
// state-changing NVML call, named by TESSERA_FAKE_NVML_LOG, and one line per nvmlInit_v2, named
// by TESSERA_FAKE_NVML_INITS. Child processes inherit all three (and TESSERA_FAKE_NVML_ROOT).
#pragma once

#include <cstdint>
#include <string>

#include "support/fixture_host.h"

namespace tessera::testing {

class FakeNvmlState {
 public:
  // Copies tests/fixtures/hosts/<fixture>.nvml; an empty name starts from no GPUs at all.
  explicit FakeNvmlState(const std::string& fixture);
  FakeNvmlState(const FakeNvmlState&) = delete;
  FakeNvmlState& operator=(const FakeNvmlState&) = delete;
  ~FakeNvmlState();

  const std::string& state_path() const { return state_; }
  const std::string& log_path() const { return log_; }
  std::string State() const;                   // the state file now
  std::string Log() const;                     // state-changing calls so far, one per line
  size_t Inits() const;                        // how often NVML was initialised so far
  void Append(const std::string& line) const;  // e.g. "fail nvmlGpuInstanceDestroy 19"
  // Replaces `from` with `to` in the state file (e.g. "processes=0" -> "processes=2").
  void Replace(const std::string& from, const std::string& to) const;
  // From now on instances the stand-in creates or destroys add or remove their capability files
  // under `root`/proc/driver/nvidia/capabilities, as the driver does (TESSERA_FAKE_NVML_ROOT).
  void MirrorCapabilitiesUnder(const std::string& root) const;

 private:
  TempDir dir_;
  std::string state_;
  std::string log_;
  std::string inits_;
};

// The stand-in NVML's telemetry scenario for one test (tests/deviceplugin/fake_nvml_telemetry.c):
// a file named by TESSERA_FAKE_NVML_SCENARIO that the test rewrites while NVML is in use, and
// the log of what the stand-in served (TESSERA_FAKE_NVML_SERVED). Child processes inherit both.
class FakeNvmlScenario {
 public:
  FakeNvmlScenario();
  FakeNvmlScenario(const FakeNvmlScenario&) = delete;
  FakeNvmlScenario& operator=(const FakeNvmlScenario&) = delete;
  ~FakeNvmlScenario();

  const std::string& path() const { return scenario_; }
  // Replaces the scenario (atomically: the library never reads half a file).
  void Write(const std::string& text) const;
  // What the stand-in served so far, one line per sample or energy reading.
  std::string Served() const;

 private:
  TempDir dir_;
  std::string scenario_;
  std::string served_;
};

// The stand-in NVML's fault state and events for one test (tests/deviceplugin/fake_nvml.c and
// fake_nvml_faults.c), the folder of its NVML holders and the stand-in nvidia-smi's reset log
// (tests/health/fake_nvidia_smi.c): TESSERA_FAKE_NVML_FAULTS, TESSERA_FAKE_NVML_EVENTS,
// TESSERA_FAKE_NVML_HOLDERS and TESSERA_FAKE_NVIDIA_SMI_LOG. Child processes inherit them.
class FakeNvmlFaults {
 public:
  // `holders_refuse_resets`: whether the stand-in nvidia-smi refuses a reset while another
  // process holds NVML (the real one does; a test of a program that cannot let go of NVML
  // leaves it off).
  explicit FakeNvmlFaults(bool holders_refuse_resets = true);
  FakeNvmlFaults(const FakeNvmlFaults&) = delete;
  FakeNvmlFaults& operator=(const FakeNvmlFaults&) = delete;
  ~FakeNvmlFaults();

  const std::string& faults_path() const { return faults_; }
  const std::string& events_path() const { return events_; }
  // Replaces the fault state (atomically), e.g. "0000:65:00.0 uuid=GPU-a remap_pending=1\n".
  void SetFaults(const std::string& text) const;
  std::string Faults() const;
  // Appends one event line (atomically), e.g. "0000:65:00.0 94 gi=1 ci=0" or "0000:65:00.0 ecc".
  void AddEvent(const std::string& line) const;
  // The stand-in nvidia-smi's resets so far: "reset <id> <pci> -> <exit status>" lines.
  std::string ResetLog() const;

 private:
  TempDir dir_;
  std::string faults_;
  std::string events_;
  std::string holders_;
  std::string smi_log_;
};

// Microseconds since the epoch, as NVML timestamps its samples.
uint64_t NowMicros();

}  // namespace tessera::testing

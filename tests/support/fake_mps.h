// The stand-in MPS of one test: tests/mps/fake_mps_control.c (a stand-in nvidia-cuda-mps-control)
// steered through a directory named by TESSERA_FAKE_MPS_DIR, and the stand-in NVML's compute
// modes (tests/deviceplugin/fake_nvml_compute_mode.c) in a file named by
// TESSERA_FAKE_NVML_COMPUTE_MODES. The stand-in NVML's call log (TESSERA_FAKE_NVML_LOG) is pointed
// at the same transcript, so compute-mode calls and MPS commands read in the order they
// happened. Child processes inherit all of it.
#pragma once

#include <string>
#include <vector>

#include "support/fixture_host.h"

namespace tessera::testing {

class FakeMps {
 public:
  FakeMps();
  FakeMps(const FakeMps&) = delete;
  FakeMps& operator=(const FakeMps&) = delete;
  ~FakeMps();

  // The stand-in control binary (what Options::control_binary is set to).
  static std::string Binary();
  const std::string& dir() const { return dir_.path(); }
  // Every daemon start, command and compute-mode change so far, one per line.
  std::string Transcript() const;
  // Transcript lines containing `needle`, in order.
  std::vector<std::string> Lines(const std::string& needle) const;
  // "exit", "hang" or "fault" for the daemon of `uuid`; "" clears it.
  void SetBehaviour(const std::string& uuid, const std::string& behaviour) const;
  void SetStartDelayMs(const std::string& uuid, int ms) const;
  void SetAnswerDelayMs(const std::string& uuid, int ms) const;
  // The stand-in nvidia-smi (compute-policy --set-timeslice only), logging to the transcript.
  static std::string NvidiaSmi();
  // The client PIDs of `uuid`'s simulated server (none: no server runs).
  void SetClients(const std::string& uuid, const std::vector<int>& pids) const;
  // NVML's compute mode of the GPU at `pci` now (0 DEFAULT, 3 EXCLUSIVE_PROCESS).
  int ComputeMode(const std::string& pci) const;
  // Makes nvmlDeviceSetComputeMode answer `nvml_error`.
  void FailSetComputeMode(int nvml_error) const;
  // Each transcript line notes what this file held then ("{uuid}" stands for the GPU).
  void Watch(const std::string& path_pattern) const;

 private:
  TempDir dir_;
};

}  // namespace tessera::testing

// The firmware checker (leader only): the last steps of the lease flow. A GPU whose container
// ended (releasing) is checked (checking) and then goes free, draining or quarantined. Checks of
// this host's GPUs run a program or compare the option ROM with its baseline; on other nodes the
// backend runs them there. Only the replica that leads runs it.
#pragma once

#include <string>
#include <thread>
#include <utility>

#include "backends/backend.h"
#include "serve/model.h"
#include "serve/shared_gpus.h"

namespace tessera::serve {

class FirmwareChecker {
 public:
  FirmwareChecker(Model& model, backends::ContainerBackend& backend, SharedGpus& shared);
  ~FirmwareChecker();
  FirmwareChecker(const FirmwareChecker&) = delete;
  FirmwareChecker& operator=(const FirmwareChecker&) = delete;

  void Start();
  void Stop();  // after the check under way, if any, returned

 private:
  void Loop();
  // Pass/fail and the reason; runs without mu.
  std::pair<bool, std::string> RunFirmwareCheck(const fleet::GpuRecord& gpu) const;

  Model& model_;
  backends::ContainerBackend& backend_;
  SharedGpus& shared_;     // a shared GPU's MPS daemon goes before its check
  bool stopping_ = false;  // guarded by model_.mu
  std::thread thread_;
};

}  // namespace tessera::serve

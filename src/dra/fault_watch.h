// The DRA plugin's GPU fault watch: the health monitor over this node's GPUs, the fault handler it
// feeds (src/dra/faults.h), and a recovery thread that drives each faulted GPU through reset and
// verification with the configured commands. The plugin's loop reads Faults() into the state that
// taints the slice's devices and the health stream.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "common/error.h"
#include "dra/dra.h"
#include "dra/plugin_options.h"
#include "health/health.h"

namespace tessera::dra {

class FaultWatch {
 public:
  // Watches every GPU of the driver's node, restoring the faults of <plugin-dir>/gpu-faults.json
  // first. Unavailable when neither NVML nor sysfs can watch any of them and no restored GPU is
  // out of service (the plugin then runs with device presence only; with one, the watch keeps
  // the restored taints without recovering); InvalidArgument for a bad --fault-table or a fault
  // state file it cannot read.
  static Result<std::unique_ptr<FaultWatch>> Start(const PluginOptions& options,
                                                   const Driver& driver);
  // Stops the recovery thread, then the monitor.
  ~FaultWatch();
  FaultWatch(const FaultWatch&) = delete;
  FaultWatch& operator=(const FaultWatch&) = delete;

  // The faults that taint devices now, by PCI address.
  std::map<std::string, DeviceFault> Faults() const;
  // Recover off: follows the node agent's published health of each GPU (FaultHandler::Follow).
  // Returns whether any taint or record changed.
  bool Follow(const std::map<std::string, health::GpuHealth>& published);

 private:
  struct State;
  explicit FaultWatch(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace tessera::dra

// Internal to health/watch: what the Monitor makes of what it reads, apart from the reading
// (signals.cc, pure, so tests and the NVML-event fuzz target reach it), and the sysfs reads of
// GPUs no driver holds (sysfs.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "health/health.h"
#include "nvml/nvml.h"

namespace tessera::health {

// An NVML event of the GPU at `pci` as a Signal: a critical Xid (kXid, with the MIG instance it
// names) or a double-bit ECC error (kDoubleBitEcc); nullopt for any other event type.
std::optional<Signal> EventSignal(const nvml::Event& event, const std::string& pci, int64_t at_ms);

// Field 230's value as a RecoveryAction; nullopt for a value NVML does not define.
std::optional<RecoveryAction> RecoveryActionOf(uint32_t value);

// The signals of a GPU whose state went from `before` to `now`: one for each fact that turned
// bad (lost, remap pending, remap failure, retired pages pending, a recovery action other than
// none that changed), and kUncorrectedEcc when the volatile count grew. Each carries the
// recovery action read now.
std::vector<Signal> StateSignals(const std::string& pci, const GpuState& before,
                                 const GpuState& now, int64_t at_ms);

// A PCIe AER counter file (/sys/bus/pci/devices/<pci>/aer_dev_fatal): lines "<name> <count>",
// the total as "TOTAL_ERR_FATAL <n>" (or _NONFATAL, _COR). The count of `name`; nullopt when
// the text has no such line or its count is not a number.
std::optional<uint64_t> AerCount(std::string_view text, std::string_view name);

// What sysfs says of a PCI device no driver holds.
struct SysfsState {
  bool gone = false;         // its directory is not there
  bool config_ones = false;  // its config space reads all ones (the device does not answer)
  std::optional<uint64_t> aer_fatal;  // TOTAL_ERR_FATAL (nullopt: no AER counters)
};
SysfsState ReadSysfs(const std::string& root, const std::string& pci);

// The signals of a sysfs-watched GPU whose state went from `before` to `now` (the AER counter
// compared only when both were read).
std::vector<Signal> SysfsSignals(const std::string& pci, const SysfsState& before,
                                 const SysfsState& now, int64_t at_ms);

// `argv` with "{uuid}", "{pci}" and "{index}" replaced (recoverer.cc).
std::vector<std::string> ExpandCommand(const std::vector<std::string>& argv,
                                       const std::string& uuid, const std::string& pci, int index);

}  // namespace tessera::health

// The DRA plugin's fault state: each faulted GPU's recovery record (health::GpuHealth) and the
// taint it puts on the GPU's devices, in <plugin-dir>/gpu-faults.json. It is written before a
// taint is published and before a recovered GPU loses its taint, so a restarted plugin publishes
// the same taint (same timeAdded) and resumes the recovery where it stopped.
//
// {"version":1,"gpus":{"0000:9d:00.0":{"step":"draining","reason":"gpu-fault: Xid 79 ...",
//   "attempts":0,"stepSinceMs":...,"faultedMs":...,"history":[{"atMs":...,"signal":"xid",
//   "xid":79,"class":"gpu","action":"stop-gpu","reason":"..."}],
//   "taint":{"value":"xid-79","effect":"NoExecute","timeAdded":...,"gpuInstanceId":1}}}}
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "common/error.h"
#include "dra/dra.h"
#include "health/health.h"

namespace tessera::dra {

struct FaultRecord {
  health::GpuHealth health;
  DeviceFault taint;  // meaningful while the GPU is out of service
  friend bool operator==(const FaultRecord&, const FaultRecord&) = default;
};
using FaultState = std::map<std::string, FaultRecord>;  // by canonical PCI address

inline constexpr std::string_view kFaultStateFile = "gpu-faults.json";  // in the plugin dir
inline constexpr size_t kMaxFaultStateGpus = 1024;
inline constexpr size_t kMaxFaultStateText = 512;  // a reason, a history entry's text
inline constexpr size_t kMaxFaultStateBytes = size_t{1} << 20;

// Pure. Serialize cuts texts to their bounds, so what it writes parses back. The parser refuses
// (InvalidArgument naming the field) rather than drops: an unknown field or step, a key that is
// not a canonical PCI address, more than kMaxFaultStateGpus GPUs, a history longer than
// health::kMaxHistory, a text over kMaxFaultStateText bytes, a taint value that is not a label
// value, a negative time or count. A record out of service needs its taint.
std::string SerializeFaultState(const FaultState& state);
Result<FaultState> ParseFaultState(std::string_view json);

// A missing file is no fault; anything else unreadable (not a regular file, over
// kMaxFaultStateBytes, malformed) is an error naming the path. Writes replace the file
// atomically and durably.
Result<FaultState> ReadFaultStateFile(const std::string& path);
Status WriteFaultStateFile(const std::string& path, const FaultState& state);

}  // namespace tessera::dra

// NVML's per-process records, from the bytes a fill call left in the caller's buffer. Pure.
#include <algorithm>
#include <cstring>

#include "nvml/nvml.h"
#include "nvml/nvml_abi.h"

namespace tessera::nvml {

std::vector<ProcessMemory> ProcessRecords(std::string_view bytes, bool mps) {
  std::vector<ProcessMemory> out;
  const size_t count = bytes.size() / sizeof(abi::ProcessInfo);
  out.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    abi::ProcessInfo raw;
    std::memcpy(&raw, bytes.data() + i * sizeof raw, sizeof raw);
    ProcessMemory process;
    process.pid = raw.pid;
    if (raw.used_gpu_memory != abi::kValueNotAvailable) process.used_bytes = raw.used_gpu_memory;
    process.gpu_instance_id = raw.gpu_instance_id;
    process.compute_instance_id = raw.compute_instance_id;
    process.mps = mps;
    out.push_back(process);
  }
  return out;
}

std::vector<ProcessUtilization> UtilizationRecords(std::string_view bytes) {
  std::vector<ProcessUtilization> out;
  const size_t count = bytes.size() / sizeof(abi::ProcessUtilizationSample);
  out.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    abi::ProcessUtilizationSample raw;
    std::memcpy(&raw, bytes.data() + i * sizeof raw, sizeof raw);
    out.push_back(
        {raw.pid, raw.time_stamp, std::min(raw.sm_util, 100u), std::min(raw.mem_util, 100u)});
  }
  return out;
}

}  // namespace tessera::nvml

// NVML's process lists of one GPU (compute, MPS, and each MIG device's) as one entry per PID.
// Pure.
#include <algorithm>
#include <unordered_map>

#include "telemetry/telemetry.h"

namespace tessera::telemetry {

std::vector<nvml::ProcessMemory> MergeProcessLists(
    const std::vector<std::vector<nvml::ProcessMemory>>& lists, size_t max_processes) {
  std::vector<nvml::ProcessMemory> out;
  std::unordered_map<uint32_t, size_t> index;  // pid -> position in out
  for (const auto& list : lists) {
    for (const auto& process : list) {
      if (process.pid == 0) continue;  // not a process NVML could name
      auto [it, inserted] = index.try_emplace(process.pid, out.size());
      if (inserted) {
        if (out.size() >= max_processes) {
          index.erase(it);
          continue;
        }
        out.push_back(process);
        continue;
      }
      // The same process in two lists (an MPS client in both, a MIG process listed by the GPU
      // and by its MIG device): one process, its larger figure, and the MIG placement where one
      // list knows it.
      auto& kept = out[it->second];
      if (process.used_bytes && (!kept.used_bytes || *process.used_bytes > *kept.used_bytes))
        kept.used_bytes = process.used_bytes;
      kept.mps = kept.mps || process.mps;
      if (kept.gpu_instance_id == 0xFFFFFFFFu) {
        kept.gpu_instance_id = process.gpu_instance_id;
        kept.compute_instance_id = process.compute_instance_id;
      }
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.pid < b.pid; });
  return out;
}

}  // namespace tessera::telemetry

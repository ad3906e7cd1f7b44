// NVIDIA's management library (NVML), opened with dlopen at run time: the MIG queries the
// inventory needs and the MIG changes `tessera mig apply` makes. Nothing links libnvidia-ml, so
// every tessera program starts on hosts without the NVIDIA driver; a missing library or entry
// point is an Unavailable error the caller turns into a warning.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"

namespace tessera::nvml {

// A GPU instance profile as NVML describes it. `index` is NVML's enum value (what the
// profile-info call takes); `id` is the profile ID nvidia-smi shows and the instance calls take.
struct GpuInstanceProfile {
  uint32_t index = 0;
  uint32_t id = 0;
  std::string name;          // "1g.10gb", "1g.10gb+me" (NVML's "MIG " prefix removed)
  uint32_t slice_count = 0;  // compute slices
  uint32_t instance_count = 0;
  uint32_t multiprocessors = 0;
  uint64_t memory_mb = 0;
};

struct Placement {
  uint32_t start = 0;  // first memory slice
  uint32_t size = 0;   // memory slices covered
  friend bool operator==(const Placement&, const Placement&) = default;
};

struct GpuInstance {
  uint32_t id = 0;
  uint32_t profile_id = 0;
  Placement placement;
  std::vector<uint32_t> compute_instance_ids;
};

// One MIG device handle (a compute instance), as enumerated by nvmlDeviceGetMigDeviceHandleByIndex.
struct MigDevice {
  uint32_t index = 0;  // the handle index: nvidia-ctk's <mig> in "<gpu>:<mig>"
  uint32_t gpu_instance_id = 0;
  uint32_t compute_instance_id = 0;
  std::string uuid;  // "MIG-…"
  uint64_t memory_bytes = 0;
  uint32_t multiprocessors = 0;
  uint32_t gpu_instance_slices = 0;
  uint32_t compute_instance_slices = 0;
};

struct MigMode {
  bool current = false;
  bool pending = false;
};

// One GPU known to NVML, found by PCI address.
class Gpu {
 public:
  explicit Gpu(void* handle) : handle_(handle) {}
  void* handle() const { return handle_; }

 private:
  void* handle_;
};

class Library {
 public:
  // dlopen()s `path` (e.g. "libnvidia-ml.so.1") and calls nvmlInit_v2.
  static Result<std::unique_ptr<Library>> Open(const std::string& path);
  ~Library();
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;

  // `pci_address` in sysfs form ("0000:18:00.0").
  Result<Gpu> GpuByPci(const std::string& pci_address) const;

  // NotFound-free: a GPU without MIG support answers nullopt.
  Result<std::optional<MigMode>> GetMigMode(Gpu gpu) const;
  Result<std::vector<GpuInstanceProfile>> Profiles(Gpu gpu) const;
  Result<std::vector<GpuInstance>> GpuInstances(Gpu gpu) const;
  Result<std::vector<MigDevice>> MigDevices(Gpu gpu) const;
  // Processes using the GPU (or any of its MIG devices) right now.
  Result<uint32_t> RunningProcessCount(Gpu gpu) const;
  // The GPU's whole memory in bytes (nvmlDeviceGetMemoryInfo's total; nvidia-smi's
  // memory.total is it in MiB).
  Result<uint64_t> MemoryTotal(Gpu gpu) const;
  // The GPU's module ID on its baseboard (nvmlDeviceGetModuleId): what NVLink fabric partitions
  // name GPUs by (HGX: 1..8, not PCI order). nullopt when the GPU has none (not supported).
  Result<std::optional<uint32_t>> ModuleId(Gpu gpu) const;

  // State changes. SetMigMode answers whether the new mode is active (false: the GPU needs a
  // reset before it takes effect).
  Result<bool> SetMigMode(Gpu gpu, bool enabled) const;
  // Creates a GPU instance of `profile_id` at `placement` with one compute instance covering
  // all of it; answers the new GPU instance ID.
  Result<uint32_t> CreateGpuInstance(Gpu gpu, uint32_t profile_id, Placement placement) const;
  // Destroys the GPU instance `gpu_instance_id` and every compute instance in it.
  Status DestroyGpuInstance(Gpu gpu, uint32_t gpu_instance_id) const;

  struct Api;

 private:
  explicit Library(std::unique_ptr<Api> api);
  std::unique_ptr<Api> api_;
};

}  // namespace tessera::nvml

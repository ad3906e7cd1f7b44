// NVIDIA's management library (NVML), opened with dlopen at run time: the MIG queries the
// inventory needs, the MIG changes `tessera mig apply` makes, the compute mode and memory size
// of GPUs shared through MPS, and the telemetry reads (per-GPU figures, per-process memory and
// SM use, accounting, GPM, Xid events) the collector takes, and the fault events and state the
// health watch reads. Nothing links libnvidia-ml, so every
// tessera program starts on hosts without the NVIDIA driver; a missing library or entry point is
// an Unavailable error the caller turns into a warning.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
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

// nvmlComputeMode_t. MPS needs EXCLUSIVE_PROCESS: only the MPS server then holds a context, so
// a process that bypasses the daemon cannot open one of its own.
enum class ComputeMode : uint32_t {
  kDefault = 0,
  kExclusiveThread = 1,  // deprecated by NVIDIA; read, never set
  kProhibited = 2,
  kExclusiveProcess = 3,
};
// nvidia-smi's names: "DEFAULT", "EXCLUSIVE_THREAD", "PROHIBITED", "EXCLUSIVE_PROCESS".
const char* ComputeModeName(ComputeMode mode);

// ---- Telemetry values ----

// How one telemetry read went. A board or driver without a figure answers kNotSupported (normal,
// not an error); kNotFound is NVML's "no new samples"; kGpuLost is a GPU that fell off the bus.
enum class ReadStatus { kOk, kNotSupported, kNotFound, kGpuLost, kFailed };
const char* ReadStatusName(ReadStatus status);  // "ok", "not supported", ...

template <typename T>
struct Read {
  ReadStatus status = ReadStatus::kFailed;
  T value{};
  int code = 0;  // NVML's return code
  bool ok() const { return status == ReadStatus::kOk; }
};

// A process using a GPU (or a MIG device) and the memory it holds there, by host PID.
struct ProcessMemory {
  uint32_t pid = 0;
  std::optional<uint64_t> used_bytes;  // unset: the driver cannot tell (NVML_VALUE_NOT_AVAILABLE)
  uint32_t gpu_instance_id = 0;        // MIG: where it runs (0xFFFFFFFF: the whole GPU)
  uint32_t compute_instance_id = 0;
  bool mps = false;  // listed by the MPS variant (an MPS client)
  friend bool operator==(const ProcessMemory&, const ProcessMemory&) = default;
};

// One process's activity in one of the driver's sample periods.
struct ProcessUtilization {
  uint32_t pid = 0;
  uint64_t timestamp_us = 0;  // CPU time of the sample, microseconds since the epoch
  uint32_t sm_percent = 0;
  uint32_t memory_percent = 0;
  friend bool operator==(const ProcessUtilization&, const ProcessUtilization&) = default;
};

// Accounting mode: a process's figures over its whole life, kept after it ended.
struct AccountingStats {
  uint32_t pid = 0;
  std::optional<uint32_t> gpu_percent;  // average over its life
  std::optional<uint64_t> max_memory_bytes;
  uint64_t time_ms = 0;  // how long its context was active; 0 while it runs
  uint64_t start_us = 0;
  bool running = false;
};

struct MemoryInfo {
  uint64_t total = 0, free = 0, used = 0;
};

// NVML's raw records as a fill call leaves them in the caller's buffer (records.cc; pure, so the
// process-list fuzz target reaches them): `bytes` holds whole nvmlProcessInfo_t (24 bytes) or
// nvmlProcessUtilizationSample_t (32 bytes) records; a cut record at the end is ignored.
// Percentages above 100 are taken as 100.
std::vector<ProcessMemory> ProcessRecords(std::string_view bytes, bool mps);
std::vector<ProcessUtilization> UtilizationRecords(std::string_view bytes);

struct Utilization {
  uint32_t gpu_percent = 0, memory_percent = 0;
};

// One GPU known to NVML, found by PCI address.
class Gpu {
 public:
  Gpu() = default;
  explicit Gpu(void* handle) : handle_(handle) {}
  void* handle() const { return handle_; }

 private:
  void* handle_ = nullptr;
};

class Library;

// Whether `path` may be handed to dlopen: a bare name (the loader's search), a path naming a
// regular file or a link to one, or a path that does not exist (dlopen says so: Unavailable).
// InvalidArgument for anything else (a FIFO, a device, a directory). Library::Open checks it;
// flag parsing may call it to refuse a bad --nvml at start.
Status CheckLibraryPath(const std::string& path);

// A GPM sample (nvmlGpmSampleAlloc), freed through the library that made it. Move-only.
class GpmSample {
 public:
  GpmSample() = default;
  GpmSample(const Library* owner, void* handle) : owner_(owner), handle_(handle) {}
  GpmSample(GpmSample&& other) noexcept { *this = std::move(other); }
  GpmSample& operator=(GpmSample&& other) noexcept;
  ~GpmSample();
  void* handle() const { return handle_; }
  explicit operator bool() const { return handle_ != nullptr; }

 private:
  const Library* owner_ = nullptr;
  void* handle_ = nullptr;
};

// A Xid event as NVML delivers it: the GPU handle it names and the Xid.
struct XidEvent {
  void* gpu = nullptr;
  uint64_t xid = 0;
  uint32_t gpu_instance_id = 0;
};

// ---- Health values (health_reads.cc) ----

// NVML's event types (nvmlEventType*) the health watch registers for.
inline constexpr uint64_t kEventDoubleBitEccError = 0x2;
inline constexpr uint64_t kEventXidCriticalError = 0x8;
inline constexpr uint32_t kNoInstance = 0xFFFFFFFF;  // an event no MIG instance is named in

// One NVML event (nvmlEventData_t): the GPU handle it names (compared with handles from
// HandleByPci, never dereferenced), its type, its data (a Xid event's Xid) and, with MIG, the
// GPU and compute instance the driver attributes it to (kNoInstance: none).
struct Event {
  void* gpu = nullptr;
  uint64_t type = 0;
  uint64_t data = 0;
  uint32_t gpu_instance_id = kNoInstance;
  uint32_t compute_instance_id = kNoInstance;
};
inline constexpr size_t kEventDataBytes = 32;  // sizeof(nvmlEventData_t)
// An nvmlEventData_t's bytes as NVML leaves them (records.cc; pure, so a fuzz target reaches
// it): nullopt when `bytes` is shorter than one record; bytes past it are ignored.
std::optional<Event> DecodeEventData(std::string_view bytes);

// NVML's PCI bus ID ("00000000:65:00.0", an 8-digit domain in upper case) in sysfs form
// ("0000:65:00.0"); empty for anything of another shape (records.cc; pure).
std::string SysfsPciAddress(std::string_view nvml_bus_id);

// nvmlDeviceGetRemappedRows (Ampere and later).
struct RowRemapping {
  uint32_t correctable = 0;    // rows remapped for correctable errors
  uint32_t uncorrectable = 0;  // rows remapped for uncorrectable errors
  bool pending = false;        // a remap waits for a reset
  bool failure = false;        // a remap failed: the GPU cannot repair itself
};

class Library {
 public:
  // dlopen()s `path` (e.g. "libnvidia-ml.so.1") and calls nvmlInit_v2. A path with a slash must
  // name a regular file (or a link to one): anything else (a FIFO would block dlopen's open
  // forever, a device or a directory) is InvalidArgument, before it is opened.
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

  Result<ComputeMode> GetComputeMode(Gpu gpu) const;

  // State changes. SetComputeMode needs root. SetMigMode answers whether the new mode is active
  // (false: the GPU needs a reset before it takes effect).
  Result<bool> SetMigMode(Gpu gpu, bool enabled) const;
  // Creates a GPU instance of `profile_id` at `placement` with one compute instance covering
  // all of it; answers the new GPU instance ID.
  Result<uint32_t> CreateGpuInstance(Gpu gpu, uint32_t profile_id, Placement placement) const;
  // Destroys the GPU instance `gpu_instance_id` and every compute instance in it.
  Status DestroyGpuInstance(Gpu gpu, uint32_t gpu_instance_id) const;
  Status SetComputeMode(Gpu gpu, ComputeMode mode) const;

  // ---- Telemetry reads (telemetry_reads.cc). `gpu` may be a MIG device handle where NVML
  // takes one (memory, processes). None of them fails the caller: each says how it went. ----
  Read<std::string> Uuid(Gpu gpu) const;
  Read<Utilization> UtilizationRates(Gpu gpu) const;
  Read<MemoryInfo> Memory(Gpu gpu) const;
  Read<uint32_t> PowerMilliwatts(Gpu gpu) const;
  Read<uint64_t> TotalEnergyMillijoules(Gpu gpu) const;
  Read<uint32_t> TemperatureCelsius(Gpu gpu) const;
  // NVML's product name ("NVIDIA H100 80GB HBM3"), what dcgm-exporter labels modelName;
  // printable ASCII only.
  Read<std::string> Name(Gpu gpu) const;
  // The power limit the board enforces now (nvmlDeviceGetEnforcedPowerLimit), mW.
  Read<uint32_t> PowerLimitMilliwatts(Gpu gpu) const;
  // The timestamps of the driver's GPU utilisation samples newer than `last_seen_us`
  // (nvmlDeviceGetSamples, NVML_GPU_UTILIZATION_SAMPLES): one per sample period whether the GPU
  // was busy or not, so their spacing is the driver's sample period. kNotFound: none.
  Read<std::vector<uint64_t>> UtilizationSampleTimes(Gpu gpu, uint64_t last_seen_us,
                                                     size_t max_samples = 1024) const;
  // nvmlDeviceGetComputeRunningProcesses_v3 (or the MPS variant): sized by a call with count 0,
  // then filled; a list that grew in between is asked again (a few times) with the new size.
  // At most `max_processes` are taken.
  Read<std::vector<ProcessMemory>> ComputeProcesses(Gpu gpu, bool mps,
                                                    size_t max_processes = 4096) const;
  // Samples newer than `last_seen_us`; kNotFound (an empty list) when there are none.
  Read<std::vector<ProcessUtilization>> ProcessUtilizations(Gpu gpu, uint64_t last_seen_us,
                                                            size_t max_samples = 16384) const;
  Read<bool> AccountingEnabled(Gpu gpu) const;
  Read<std::vector<uint32_t>> AccountingPids(Gpu gpu, size_t max_pids = 4096) const;
  Read<AccountingStats> Accounting(Gpu gpu, uint32_t pid) const;
  // The MIG device handle at `index` (nvmlDeviceGetMigDeviceHandleByIndex); kNotFound for a hole.
  Read<Gpu> MigDeviceHandle(Gpu gpu, uint32_t index) const;
  Read<uint32_t> MaxMigDevices(Gpu gpu) const;
  // GPM: whether the board has it; a sample of the whole GPU or of one GPU instance; SM
  // utilisation (percent) between two samples of the same scope.
  Read<bool> GpmSupported(Gpu gpu) const;
  Read<GpmSample> TakeGpmSample(Gpu gpu, std::optional<uint32_t> gpu_instance_id) const;
  Read<double> GpmSmUtilPercent(const GpmSample& earlier, const GpmSample& later) const;
  // Xid events: registers `gpus` once (critical Xids), then Drain() returns what arrived without
  // waiting.
  Status WatchXids(const std::vector<Gpu>& gpus);
  std::vector<XidEvent> DrainXids(size_t max_events = 256) const;

  // ---- Health reads (health_reads.cc): a GPU's fault events and fault state. Every read
  // answers NVML_ERROR_GPU_IS_LOST as kGpuLost; a board or driver without the figure answers
  // kNotSupported. ----
  Read<Gpu> HandleByPci(const std::string& pci_address) const;  // sysfs form
  Read<std::string> PciAddress(Gpu gpu) const;                  // sysfs form
  Read<RowRemapping> RemappedRows(Gpu gpu) const;
  Read<bool> RetiredPagesPending(Gpu gpu) const;  // pre-Ampere page retirement
  // The volatile (since the last reset) uncorrected ECC error count.
  Read<uint64_t> VolatileUncorrectedEcc(Gpu gpu) const;
  // The driver's recovery action (field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, r570 and later):
  // 0 none, 1 GPU reset, 2 node reboot, 3 drain peer-to-peer, 4 drain and reset.
  Read<uint32_t> RecoveryAction(Gpu gpu) const;
  // Registers `gpu` on the health event set (made on first use; apart from WatchXids' set) for
  // `types`; a GPU that refuses the whole mask is registered for each type it accepts. Answers
  // the types registered.
  Read<uint64_t> RegisterEvents(Gpu gpu, uint64_t types);
  // The next event of the health set, waiting up to `timeout_ms` (0: what has arrived);
  // kNotFound when none came. Safe beside reads on other threads.
  Read<Event> WaitEvent(uint32_t timeout_ms) const;

  struct Api;

 private:
  friend class GpmSample;
  explicit Library(std::unique_ptr<Api> api);
  void FreeGpmSample(void* handle) const;
  std::unique_ptr<Api> api_;
};

}  // namespace tessera::nvml

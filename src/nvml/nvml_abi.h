// The subset of NVIDIA's management library ABI (nvml.h) that tessera calls, declared from its
// documented types and constants. NVML is opened with dlopen at run time only, so nothing here
// is linked; the layouts below must match the library's byte for byte.
#pragma once

namespace tessera::nvml::abi {

using Return = int;
using Device = struct DeviceOpaque*;
using GpuInstanceHandle = struct GpuInstanceOpaque*;
using ComputeInstanceHandle = struct ComputeInstanceOpaque*;

constexpr Return kSuccess = 0;
constexpr Return kErrorInvalidArgument = 2;
constexpr Return kErrorNotSupported = 3;
constexpr Return kErrorNoPermission = 4;
constexpr Return kErrorNotFound = 6;
constexpr Return kErrorInsufficientSize = 7;
constexpr Return kErrorTimeout = 10;
constexpr Return kErrorGpuIsLost = 15;
constexpr Return kErrorInUse = 19;

constexpr unsigned int kMigDisable = 0;
constexpr unsigned int kMigEnable = 1;

// nvmlGpuInstanceProfile: profile *indices* 0..9 (NVML_GPU_INSTANCE_PROFILE_1_SLICE = 0,
// 2_SLICE, 3_SLICE, 4_SLICE, 7_SLICE, 8_SLICE, 6_SLICE, 1_SLICE_REV1, 2_SLICE_REV1,
// 1_SLICE_REV2). The profile *ID* nvidia-smi prints (19 for 1g.10gb on H100) is the `id` field
// of the info an index returns; NVML's instance calls take that ID.
constexpr unsigned int kGpuInstanceProfileCount = 10;
// nvmlComputeInstanceProfile indices: 1_SLICE = 0, 2_SLICE, 3_SLICE, 4_SLICE, 7_SLICE, 8_SLICE,
// 6_SLICE, 1_SLICE_REV1.
constexpr unsigned int kComputeInstanceProfileCount = 8;
constexpr unsigned int kComputeInstanceEngineProfileShared = 0;

constexpr unsigned int kDeviceUuidBufferSize = 96;  // NVML_DEVICE_UUID_V2_BUFFER_SIZE
constexpr unsigned int kDeviceNameV2BufferSize = 96;

struct GpuInstancePlacement {
  unsigned int start;
  unsigned int size;
};

// nvmlGpuInstanceProfileInfo_v2_t, requested through nvmlDeviceGetGpuInstanceProfileInfoV with
// version = sizeof | 2 << 24 (NVML_STRUCT_VERSION).
struct GpuInstanceProfileInfoV2 {
  unsigned int version;
  unsigned int id;
  unsigned int is_p2p_supported;
  unsigned int slice_count;
  unsigned int instance_count;
  unsigned int multiprocessor_count;
  unsigned int copy_engine_count;
  unsigned int decoder_count;
  unsigned int encoder_count;
  unsigned int jpeg_count;
  unsigned int ofa_count;
  unsigned long long memory_size_mb;
  char name[kDeviceNameV2BufferSize];
};
constexpr unsigned int kGpuInstanceProfileInfoV2Version =
    static_cast<unsigned int>(sizeof(GpuInstanceProfileInfoV2)) | (2u << 24);

// nvmlGpuInstanceProfileInfo_t (the unversioned call, for drivers without the V entry point).
struct GpuInstanceProfileInfo {
  unsigned int id;
  unsigned int is_p2p_supported;
  unsigned int slice_count;
  unsigned int instance_count;
  unsigned int multiprocessor_count;
  unsigned int copy_engine_count;
  unsigned int decoder_count;
  unsigned int encoder_count;
  unsigned int jpeg_count;
  unsigned int ofa_count;
  unsigned long long memory_size_mb;
};

struct GpuInstanceInfo {
  Device device;
  unsigned int id;
  unsigned int profile_id;
  GpuInstancePlacement placement;
};

struct ComputeInstanceProfileInfo {
  unsigned int id;
  unsigned int slice_count;
  unsigned int instance_count;
  unsigned int multiprocessor_count;
  unsigned int shared_copy_engine_count;
  unsigned int shared_decoder_count;
  unsigned int shared_encoder_count;
  unsigned int shared_jpeg_count;
  unsigned int shared_ofa_count;
};

struct ComputeInstancePlacement {
  unsigned int start;
  unsigned int size;
};

struct ComputeInstanceInfo {
  Device device;
  GpuInstanceHandle gpu_instance;
  unsigned int id;
  unsigned int profile_id;
  ComputeInstancePlacement placement;
};

// nvmlDeviceAttributes_t: what a MIG device handle reports about its slice.
struct DeviceAttributes {
  unsigned int multiprocessor_count;
  unsigned int shared_copy_engine_count;
  unsigned int shared_decoder_count;
  unsigned int shared_encoder_count;
  unsigned int shared_jpeg_count;
  unsigned int shared_ofa_count;
  unsigned int gpu_instance_slice_count;
  unsigned int compute_instance_slice_count;
  unsigned long long memory_size_mb;
};

struct Memory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

// nvmlProcessInfo_t (the _v3 entry points).
struct ProcessInfo {
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};

// nvmlUtilization_t: percent of the last sample period a kernel ran / memory was read or written.
struct UtilizationRates {
  unsigned int gpu;
  unsigned int memory;
};

// nvmlProcessUtilizationSample_t: one process's activity in one of the driver's sample periods.
struct ProcessUtilizationSample {
  unsigned int pid;
  unsigned long long time_stamp;  // CPU time, microseconds
  unsigned int sm_util;
  unsigned int mem_util;
  unsigned int enc_util;
  unsigned int dec_util;
};

// nvmlAccountingStats_t (accounting mode): a process's figures over its whole life.
struct AccountingRecord {
  unsigned int gpu_utilization;
  unsigned int memory_utilization;
  unsigned long long max_memory_usage;
  unsigned long long time;        // ms the context was active; 0 while it runs
  unsigned long long start_time;  // CPU time, microseconds
  unsigned int is_running;
  unsigned int reserved[5];
};

// nvmlSample_t (nvmlDeviceGetSamples): a CPU timestamp and an nvmlValue_t (an 8-byte union; the
// utilisation samples are unsigned ints in it).
struct Sample {
  unsigned long long time_stamp;  // CPU time, microseconds
  unsigned long long value;
};
constexpr unsigned int kGpuUtilizationSamples = 1;  // NVML_GPU_UTILIZATION_SAMPLES

constexpr unsigned int kTemperatureGpu = 0;  // NVML_TEMPERATURE_GPU
constexpr unsigned int kFeatureEnabled = 1;  // NVML_FEATURE_ENABLED
// usedGpuMemory and the accounting figures when the driver cannot tell (NVML_VALUE_NOT_AVAILABLE).
constexpr unsigned long long kValueNotAvailable = ~0ULL;
constexpr unsigned int kValueNotAvailable32 = ~0U;
constexpr unsigned long long kEventTypeXidCriticalError = 0x8ULL;
constexpr unsigned long long kEventTypeDoubleBitEccError = 0x2ULL;

// nvmlEventData_t.
struct EventData {
  Device device;
  unsigned long long event_type;
  unsigned long long event_data;  // the Xid
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};
using EventSet = struct EventSetOpaque*;

// Health reads (health_reads.cc).
constexpr unsigned int kMemoryErrorTypeUncorrected = 1;  // NVML_MEMORY_ERROR_TYPE_UNCORRECTED
constexpr unsigned int kVolatileEcc = 0;                 // NVML_VOLATILE_ECC
constexpr unsigned int kFieldGpuRecoveryAction = 230;    // NVML_FI_DEV_GET_GPU_RECOVERY_ACTION

// nvmlValueType_t: which member of nvmlValue_t a field value fills.
constexpr unsigned int kValueTypeDouble = 0;
constexpr unsigned int kValueTypeUnsignedInt = 1;
constexpr unsigned int kValueTypeUnsignedLong = 2;
constexpr unsigned int kValueTypeUnsignedLongLong = 3;
constexpr unsigned int kValueTypeSignedLongLong = 4;
constexpr unsigned int kValueTypeSignedInt = 5;
constexpr unsigned int kValueTypeUnsignedShort = 6;

// nvmlFieldValue_t (nvmlDeviceGetFieldValues): the caller sets field_id; NVML fills the rest,
// with a return code of its own per field. `value` is nvmlValue_t, an 8-byte union read by
// value_type.
struct FieldValue {
  unsigned int field_id;
  unsigned int scope_id;
  long long timestamp;
  long long latency_usec;
  unsigned int value_type;
  Return nvml_return;
  unsigned char value[8];
};

// nvmlPciInfo_t (nvmlDeviceGetPciInfo_v3).
struct PciInfo {
  char bus_id_legacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pci_device_id;
  unsigned int pci_subsystem_id;
  char bus_id[32];  // "00000000:65:00.0": an 8-digit domain, upper-case hex
};

// GPU performance monitoring (GPM, Hopper and later): samples are opaque handles; a metric is
// computed from two of them.
using GpmSampleHandle = struct GpmSampleOpaque*;
constexpr unsigned int kGpmMetricSmUtil = 2;       // NVML_GPM_METRIC_SM_UTIL, percent
constexpr unsigned int kGpmMetricMax = 98;         // NVML_GPM_METRIC_MAX (array size)
constexpr unsigned int kGpmMetricsGetVersion = 1;  // NVML_GPM_METRICS_GET_VERSION
constexpr unsigned int kGpmSupportVersion = 1;     // NVML_GPM_SUPPORT_VERSION
struct GpmMetric {
  unsigned int metric_id;
  Return nvml_return;
  double value;
  struct {
    char* short_name;
    char* long_name;
    char* unit;
  } metric_info;
};
struct GpmMetricsGet {
  unsigned int version;
  unsigned int num_metrics;
  GpmSampleHandle sample1;
  GpmSampleHandle sample2;
  GpmMetric metrics[kGpmMetricMax];
};
struct GpmSupport {
  unsigned int version;
  unsigned int is_supported_device;
};

static_assert(sizeof(GpuInstanceProfileInfoV2) == 152);
static_assert(sizeof(ProcessUtilizationSample) == 32);
static_assert(sizeof(Sample) == 16);
static_assert(sizeof(AccountingRecord) == 56);
static_assert(sizeof(EventData) == 32);
static_assert(sizeof(GpmMetric) == 40);
static_assert(sizeof(GpuInstanceInfo) == 24);
static_assert(sizeof(ComputeInstanceInfo) == 32);
static_assert(sizeof(DeviceAttributes) == 40);
static_assert(sizeof(ProcessInfo) == 24);
static_assert(sizeof(FieldValue) == 40);
static_assert(alignof(FieldValue) == 8);
static_assert(sizeof(PciInfo) == 68);

}  // namespace tessera::nvml::abi

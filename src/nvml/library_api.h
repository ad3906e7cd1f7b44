// Internal to the nvml module: the entry points Library::Open looks up, shared by the files that
// call them (library.cc: MIG; telemetry_reads.cc: figures, processes, GPM, Xid events;
// health_reads.cc: fault events and the GPU's fault state).
#pragma once

#include <dlfcn.h>

#include <string>

#include "nvml/nvml.h"
#include "nvml/nvml_abi.h"

namespace tessera::nvml {

using namespace abi;

struct Library::Api {
  void* handle = nullptr;
  bool initialized = false;
  Return (*init)() = nullptr;
  Return (*shutdown)() = nullptr;
  const char* (*error_string)(Return) = nullptr;
  Return (*by_pci)(const char*, Device*) = nullptr;
  Return (*get_mig_mode)(Device, unsigned int*, unsigned int*) = nullptr;
  Return (*set_mig_mode)(Device, unsigned int, Return*) = nullptr;
  Return (*profile_info_v)(Device, unsigned int, GpuInstanceProfileInfoV2*) = nullptr;
  Return (*profile_info)(Device, unsigned int, GpuInstanceProfileInfo*) = nullptr;
  Return (*get_gpu_instances)(Device, unsigned int, GpuInstanceHandle*, unsigned int*) = nullptr;
  Return (*gpu_instance_by_id)(Device, unsigned int, GpuInstanceHandle*) = nullptr;
  Return (*gpu_instance_info)(GpuInstanceHandle, GpuInstanceInfo*) = nullptr;
  Return (*ci_profile_info)(GpuInstanceHandle, unsigned int, unsigned int,
                            ComputeInstanceProfileInfo*) = nullptr;
  Return (*get_compute_instances)(GpuInstanceHandle, unsigned int, ComputeInstanceHandle*,
                                  unsigned int*) = nullptr;
  Return (*compute_instance_info)(ComputeInstanceHandle, ComputeInstanceInfo*) = nullptr;
  Return (*create_gpu_instance)(Device, unsigned int, const GpuInstancePlacement*,
                                GpuInstanceHandle*) = nullptr;
  Return (*create_compute_instance)(GpuInstanceHandle, unsigned int,
                                    ComputeInstanceHandle*) = nullptr;
  Return (*destroy_gpu_instance)(GpuInstanceHandle) = nullptr;
  Return (*destroy_compute_instance)(ComputeInstanceHandle) = nullptr;
  Return (*max_mig_devices)(Device, unsigned int*) = nullptr;
  Return (*mig_by_index)(Device, unsigned int, Device*) = nullptr;
  Return (*gpu_instance_id)(Device, unsigned int*) = nullptr;
  Return (*compute_instance_id)(Device, unsigned int*) = nullptr;
  Return (*uuid)(Device, char*, unsigned int) = nullptr;
  Return (*memory)(Device, abi::Memory*) = nullptr;
  Return (*attributes)(Device, DeviceAttributes*) = nullptr;
  Return (*running_processes)(Device, unsigned int*, ProcessInfo*) = nullptr;
  Return (*get_compute_mode)(Device, unsigned int*) = nullptr;
  Return (*set_compute_mode)(Device, unsigned int) = nullptr;
  Return (*module_id)(Device, unsigned int*) = nullptr;
  // Telemetry (telemetry_reads.cc).
  Return (*utilization)(Device, abi::UtilizationRates*) = nullptr;
  Return (*power)(Device, unsigned int*) = nullptr;
  Return (*energy)(Device, unsigned long long*) = nullptr;
  Return (*temperature)(Device, unsigned int, unsigned int*) = nullptr;
  Return (*name)(Device, char*, unsigned int) = nullptr;
  Return (*power_limit)(Device, unsigned int*) = nullptr;
  Return (*samples)(Device, unsigned int, unsigned long long, unsigned int*, unsigned int*,
                    abi::Sample*) = nullptr;
  Return (*mps_processes)(Device, unsigned int*, ProcessInfo*) = nullptr;
  Return (*process_utilization)(Device, ProcessUtilizationSample*, unsigned int*,
                                unsigned long long) = nullptr;
  Return (*accounting_mode)(Device, unsigned int*) = nullptr;
  Return (*accounting_pids)(Device, unsigned int*, unsigned int*) = nullptr;
  Return (*accounting_stats)(Device, unsigned int, abi::AccountingRecord*) = nullptr;
  Return (*gpm_support)(Device, GpmSupport*) = nullptr;
  Return (*gpm_alloc)(abi::GpmSampleHandle*) = nullptr;
  Return (*gpm_free)(abi::GpmSampleHandle) = nullptr;
  Return (*gpm_sample)(Device, abi::GpmSampleHandle) = nullptr;
  Return (*gpm_mig_sample)(Device, unsigned int, abi::GpmSampleHandle) = nullptr;
  Return (*gpm_metrics)(GpmMetricsGet*) = nullptr;
  Return (*event_set_create)(EventSet*) = nullptr;
  Return (*event_set_free)(EventSet) = nullptr;
  Return (*register_events)(Device, unsigned long long, EventSet) = nullptr;
  Return (*event_wait)(EventSet, EventData*, unsigned int) = nullptr;
  // Health (health_reads.cc).
  Return (*remapped_rows)(Device, unsigned int*, unsigned int*, unsigned int*,
                          unsigned int*) = nullptr;
  Return (*retired_pages_pending)(Device, unsigned int*) = nullptr;
  Return (*total_ecc)(Device, unsigned int, unsigned int, unsigned long long*) = nullptr;
  Return (*field_values)(Device, int, FieldValue*) = nullptr;
  Return (*pci_info)(Device, abi::PciInfo*) = nullptr;

  EventSet xid_set = nullptr;     // Library::WatchXids (telemetry)
  EventSet health_set = nullptr;  // Library::RegisterEvents and WaitEvent (health)

  ~Api() {
    if (xid_set && event_set_free) event_set_free(xid_set);
    if (health_set && event_set_free) event_set_free(health_set);
    if (initialized && shutdown) shutdown();
    if (handle) ::dlclose(handle);
  }

  std::string Describe(const char* call, Return code) const {
    std::string text = std::string(call) + " failed: NVML error " + std::to_string(code);
    if (code == kErrorGpuIsLost) return text + " (GPU is lost)";
    if (error_string) {
      if (const char* why = error_string(code)) text += " (" + std::string(why) + ")";
    }
    return text;
  }
  Error Fail(const char* call, Return code) const {
    if (code == kErrorNotFound) return NotFound(Describe(call, code));
    if (code == kErrorInvalidArgument) return InvalidArgument(Describe(call, code));
    if (code == kErrorNoPermission) return PermissionDenied(Describe(call, code));
    if (code == kErrorInUse || code == kErrorNotSupported)
      return FailedPrecondition(Describe(call, code));
    return Unavailable(Describe(call, code));
  }
  template <typename F>
  Status Need(F* entry, const char* name) const {
    if (entry == nullptr) return Unavailable(std::string("NVML has no ") + name);
    return Ok();
  }
};

template <typename F>
void Bind(void* handle, F*& out, const char* name) {
  out = reinterpret_cast<F*>(::dlsym(handle, name));
}

// How a read went, from NVML's return code (telemetry_reads.cc and health_reads.cc).
inline ReadStatus StatusOf(Return code) {
  switch (code) {
    case kSuccess:
      return ReadStatus::kOk;
    case kErrorNotSupported:
      return ReadStatus::kNotSupported;
    case kErrorNotFound:
      return ReadStatus::kNotFound;
    case kErrorGpuIsLost:
      return ReadStatus::kGpuLost;
    default:
      return ReadStatus::kFailed;
  }
}

template <typename T>
Read<T> Answer(Return code, T value = T{}) {
  Read<T> read;
  read.status = StatusOf(code);
  read.code = code;
  if (code == kSuccess) read.value = std::move(value);
  return read;
}

// A read whose entry point the installed driver lacks.
template <typename T>
Read<T> Missing() {
  Read<T> read;
  read.status = ReadStatus::kNotSupported;
  read.code = kErrorNotSupported;
  return read;
}

inline Device DeviceOf(Gpu gpu) {
  return static_cast<Device>(gpu.handle());
}

// The telemetry entry points (each may be missing on an older driver).
void BindTelemetry(Library::Api& api);
// The health entry points (health_reads.cc; each may be missing too).
void BindHealth(Library::Api& api);

}  // namespace tessera::nvml

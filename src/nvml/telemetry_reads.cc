// Telemetry reads: per-GPU figures, per-process memory and SM use, accounting, GPM and Xid
// events. Each read says how it went (ReadStatus) instead of failing the caller: a board without
// a figure answers NOT_SUPPORTED, and one pass over many GPUs goes on past a GPU that is lost.
#include <algorithm>
#include <cstring>

#include "nvml/library_api.h"

namespace tessera::nvml {

namespace {

// How often a process list that keeps growing between the sizing call and the fill is asked
// again before the pass takes what it has.
constexpr int kListAttempts = 4;

}  // namespace

const char* ReadStatusName(ReadStatus status) {
  switch (status) {
    case ReadStatus::kOk:
      return "ok";
    case ReadStatus::kNotSupported:
      return "not supported";
    case ReadStatus::kNotFound:
      return "not found";
    case ReadStatus::kGpuLost:
      return "GPU is lost";
    case ReadStatus::kFailed:
      return "failed";
  }
  return "failed";
}

void BindTelemetry(Library::Api& api) {
  void* h = api.handle;
  Bind(h, api.utilization, "nvmlDeviceGetUtilizationRates");
  Bind(h, api.power, "nvmlDeviceGetPowerUsage");
  Bind(h, api.energy, "nvmlDeviceGetTotalEnergyConsumption");
  Bind(h, api.temperature, "nvmlDeviceGetTemperature");
  Bind(h, api.name, "nvmlDeviceGetName");
  Bind(h, api.power_limit, "nvmlDeviceGetEnforcedPowerLimit");
  Bind(h, api.samples, "nvmlDeviceGetSamples");
  Bind(h, api.mps_processes, "nvmlDeviceGetMPSComputeRunningProcesses_v3");
  Bind(h, api.process_utilization, "nvmlDeviceGetProcessUtilization");
  Bind(h, api.accounting_mode, "nvmlDeviceGetAccountingMode");
  Bind(h, api.accounting_pids, "nvmlDeviceGetAccountingPids");
  Bind(h, api.accounting_stats, "nvmlDeviceGetAccountingStats");
  Bind(h, api.gpm_support, "nvmlGpmQueryDeviceSupport");
  Bind(h, api.gpm_alloc, "nvmlGpmSampleAlloc");
  Bind(h, api.gpm_free, "nvmlGpmSampleFree");
  Bind(h, api.gpm_sample, "nvmlGpmSampleGet");
  Bind(h, api.gpm_mig_sample, "nvmlGpmMigSampleGet");
  Bind(h, api.gpm_metrics, "nvmlGpmMetricsGet");
  Bind(h, api.event_set_create, "nvmlEventSetCreate");
  Bind(h, api.event_set_free, "nvmlEventSetFree");
  Bind(h, api.register_events, "nvmlDeviceRegisterEvents");
  Bind(h, api.event_wait, "nvmlEventSetWait_v2");
}

Read<std::string> Library::Uuid(Gpu gpu) const {
  if (!api_->uuid) return Missing<std::string>();
  char uuid[kDeviceUuidBufferSize] = {};
  Return r = api_->uuid(DeviceOf(gpu), uuid, sizeof uuid);
  return Answer<std::string>(r, std::string(uuid, strnlen(uuid, sizeof uuid)));
}

Read<Utilization> Library::UtilizationRates(Gpu gpu) const {
  if (!api_->utilization) return Missing<Utilization>();
  abi::UtilizationRates raw{};
  Return r = api_->utilization(DeviceOf(gpu), &raw);
  return Answer<Utilization>(r, {std::min(raw.gpu, 100u), std::min(raw.memory, 100u)});
}

Read<MemoryInfo> Library::Memory(Gpu gpu) const {
  if (!api_->memory) return Missing<MemoryInfo>();
  abi::Memory raw{};
  Return r = api_->memory(DeviceOf(gpu), &raw);
  return Answer<MemoryInfo>(r, {raw.total, raw.free, raw.used});
}

Read<uint32_t> Library::PowerMilliwatts(Gpu gpu) const {
  if (!api_->power) return Missing<uint32_t>();
  unsigned int milliwatts = 0;
  Return r = api_->power(DeviceOf(gpu), &milliwatts);
  return Answer<uint32_t>(r, milliwatts);
}

Read<uint64_t> Library::TotalEnergyMillijoules(Gpu gpu) const {
  if (!api_->energy) return Missing<uint64_t>();
  unsigned long long millijoules = 0;
  Return r = api_->energy(DeviceOf(gpu), &millijoules);
  return Answer<uint64_t>(r, millijoules);
}

Read<uint32_t> Library::TemperatureCelsius(Gpu gpu) const {
  if (!api_->temperature) return Missing<uint32_t>();
  unsigned int celsius = 0;
  Return r = api_->temperature(DeviceOf(gpu), kTemperatureGpu, &celsius);
  return Answer<uint32_t>(r, celsius);
}

Read<std::string> Library::Name(Gpu gpu) const {
  if (!api_->name) return Missing<std::string>();
  char name[kDeviceNameV2BufferSize] = {};
  Return r = api_->name(DeviceOf(gpu), name, sizeof name);
  std::string text(name, strnlen(name, sizeof name));
  // A label value: printable ASCII only, whatever the driver wrote.
  for (char& c : text)
    if (c < 0x20 || c > 0x7e) c = '?';
  return Answer<std::string>(r, std::move(text));
}

Read<uint32_t> Library::PowerLimitMilliwatts(Gpu gpu) const {
  if (!api_->power_limit) return Missing<uint32_t>();
  unsigned int milliwatts = 0;
  Return r = api_->power_limit(DeviceOf(gpu), &milliwatts);
  return Answer<uint32_t>(r, milliwatts);
}

Read<std::vector<uint64_t>> Library::UtilizationSampleTimes(Gpu gpu, uint64_t last_seen_us,
                                                            size_t max_samples) const {
  if (!api_->samples) return Missing<std::vector<uint64_t>>();
  // Sized with no buffer, then filled; the driver keeps a short ring of them.
  unsigned int type = 0, count = 0;
  Return r =
      api_->samples(DeviceOf(gpu), kGpuUtilizationSamples, last_seen_us, &type, &count, nullptr);
  if (r != kSuccess && r != kErrorInsufficientSize) return Answer<std::vector<uint64_t>>(r);
  if (count == 0) return Answer<std::vector<uint64_t>>(kErrorNotFound);
  std::vector<abi::Sample> raw(std::min<size_t>(static_cast<size_t>(count) + 8, max_samples));
  count = static_cast<unsigned int>(raw.size());
  r = api_->samples(DeviceOf(gpu), kGpuUtilizationSamples, last_seen_us, &type, &count, raw.data());
  if (r == kErrorInsufficientSize) {
    count = static_cast<unsigned int>(raw.size());
  } else if (r != kSuccess) {
    return Answer<std::vector<uint64_t>>(r);
  }
  std::vector<uint64_t> out;
  out.reserve(std::min<size_t>(count, raw.size()));
  for (size_t i = 0; i < std::min<size_t>(count, raw.size()); ++i)
    out.push_back(raw[i].time_stamp);
  return Answer<std::vector<uint64_t>>(kSuccess, std::move(out));
}

Read<std::vector<ProcessMemory>> Library::ComputeProcesses(Gpu gpu, bool mps,
                                                           size_t max_processes) const {
  auto* call = mps ? api_->mps_processes : api_->running_processes;
  if (!call) return Missing<std::vector<ProcessMemory>>();
  // Sized by asking with count 0 (NVML answers INSUFFICIENT_SIZE and the count, or SUCCESS when
  // there are none); processes may start between that call and the fill, which then answers
  // INSUFFICIENT_SIZE again with the new count.
  unsigned int count = 0;
  Return r = call(DeviceOf(gpu), &count, nullptr);
  if (r == kSuccess) return Answer<std::vector<ProcessMemory>>(r);
  if (r != kErrorInsufficientSize) return Answer<std::vector<ProcessMemory>>(r);
  std::vector<ProcessInfo> raw;
  for (int attempt = 0; attempt < kListAttempts; ++attempt) {
    // A little headroom, so one process starting in between does not cost another round.
    const size_t wanted = std::min<size_t>(static_cast<size_t>(count) + 4, max_processes);
    raw.assign(wanted, ProcessInfo{});
    count = static_cast<unsigned int>(wanted);
    r = call(DeviceOf(gpu), &count, raw.data());
    if (r != kErrorInsufficientSize || wanted >= max_processes) break;
  }
  if (r == kErrorInsufficientSize) {
    count = static_cast<unsigned int>(raw.size());  // the list is full: take what fitted
  } else if (r != kSuccess) {
    return Answer<std::vector<ProcessMemory>>(r);
  }
  const size_t filled = std::min<size_t>(count, raw.size());
  auto out = ProcessRecords(
      std::string_view(reinterpret_cast<const char*>(raw.data()), filled * sizeof(ProcessInfo)),
      mps);
  return Answer<std::vector<ProcessMemory>>(kSuccess, std::move(out));
}

Read<std::vector<ProcessUtilization>> Library::ProcessUtilizations(Gpu gpu, uint64_t last_seen_us,
                                                                   size_t max_samples) const {
  if (!api_->process_utilization) return Missing<std::vector<ProcessUtilization>>();
  // First with no buffer for the count; NOT_FOUND means no sample newer than last_seen_us.
  unsigned int count = 0;
  Return r = api_->process_utilization(DeviceOf(gpu), nullptr, &count, last_seen_us);
  if (r != kSuccess && r != kErrorInsufficientSize) {
    return Answer<std::vector<ProcessUtilization>>(r);
  }
  if (count == 0) return Answer<std::vector<ProcessUtilization>>(kErrorNotFound);
  std::vector<ProcessUtilizationSample> raw;
  for (int attempt = 0; attempt < kListAttempts; ++attempt) {
    const size_t wanted = std::min<size_t>(static_cast<size_t>(count) + 8, max_samples);
    raw.assign(wanted, ProcessUtilizationSample{});
    count = static_cast<unsigned int>(wanted);
    r = api_->process_utilization(DeviceOf(gpu), raw.data(), &count, last_seen_us);
    if (r != kErrorInsufficientSize || wanted >= max_samples) break;
  }
  if (r == kErrorInsufficientSize) {
    count = static_cast<unsigned int>(raw.size());
  } else if (r != kSuccess) {
    return Answer<std::vector<ProcessUtilization>>(r);
  }
  const size_t filled = std::min<size_t>(count, raw.size());
  auto out = UtilizationRecords(std::string_view(reinterpret_cast<const char*>(raw.data()),
                                                 filled * sizeof(ProcessUtilizationSample)));
  return Answer<std::vector<ProcessUtilization>>(kSuccess, std::move(out));
}

Read<bool> Library::AccountingEnabled(Gpu gpu) const {
  if (!api_->accounting_mode) return Missing<bool>();
  unsigned int mode = 0;
  Return r = api_->accounting_mode(DeviceOf(gpu), &mode);
  return Answer<bool>(r, mode == kFeatureEnabled);
}

Read<std::vector<uint32_t>> Library::AccountingPids(Gpu gpu, size_t max_pids) const {
  if (!api_->accounting_pids) return Missing<std::vector<uint32_t>>();
  unsigned int count = 0;
  Return r = api_->accounting_pids(DeviceOf(gpu), &count, nullptr);
  if (r == kSuccess && count == 0) return Answer<std::vector<uint32_t>>(r);
  if (r != kSuccess && r != kErrorInsufficientSize) return Answer<std::vector<uint32_t>>(r);
  std::vector<unsigned int> pids(std::min<size_t>(static_cast<size_t>(count) + 4, max_pids));
  count = static_cast<unsigned int>(pids.size());
  r = api_->accounting_pids(DeviceOf(gpu), &count, pids.data());
  if (r == kErrorInsufficientSize) {
    count = static_cast<unsigned int>(pids.size());
  } else if (r != kSuccess) {
    return Answer<std::vector<uint32_t>>(r);
  }
  pids.resize(std::min<size_t>(count, pids.size()));
  return Answer<std::vector<uint32_t>>(kSuccess, std::vector<uint32_t>(pids.begin(), pids.end()));
}

Read<AccountingStats> Library::Accounting(Gpu gpu, uint32_t pid) const {
  if (!api_->accounting_stats) return Missing<AccountingStats>();
  abi::AccountingRecord raw{};
  Return r = api_->accounting_stats(DeviceOf(gpu), pid, &raw);
  AccountingStats stats;
  stats.pid = pid;
  if (raw.gpu_utilization != kValueNotAvailable32) stats.gpu_percent = raw.gpu_utilization;
  if (raw.max_memory_usage != kValueNotAvailable) stats.max_memory_bytes = raw.max_memory_usage;
  stats.time_ms = raw.time;
  stats.start_us = raw.start_time;
  stats.running = raw.is_running != 0;
  return Answer<AccountingStats>(r, stats);
}

Read<Gpu> Library::MigDeviceHandle(Gpu gpu, uint32_t index) const {
  if (!api_->mig_by_index) return Missing<Gpu>();
  Device mig = nullptr;
  Return r = api_->mig_by_index(DeviceOf(gpu), index, &mig);
  return Answer<Gpu>(r, Gpu(mig));
}

Read<uint32_t> Library::MaxMigDevices(Gpu gpu) const {
  if (!api_->max_mig_devices) return Missing<uint32_t>();
  unsigned int count = 0;
  Return r = api_->max_mig_devices(DeviceOf(gpu), &count);
  return Answer<uint32_t>(r, std::min(count, 64u));
}

Read<bool> Library::GpmSupported(Gpu gpu) const {
  if (!api_->gpm_support || !api_->gpm_alloc || !api_->gpm_metrics) return Missing<bool>();
  GpmSupport support{};
  support.version = kGpmSupportVersion;
  Return r = api_->gpm_support(DeviceOf(gpu), &support);
  return Answer<bool>(r, support.is_supported_device != 0);
}

Read<GpmSample> Library::TakeGpmSample(Gpu gpu, std::optional<uint32_t> gpu_instance_id) const {
  auto* take_mig = api_->gpm_mig_sample;
  if (!api_->gpm_alloc || !api_->gpm_free || (gpu_instance_id ? !take_mig : !api_->gpm_sample)) {
    return Missing<GpmSample>();
  }
  abi::GpmSampleHandle handle = nullptr;
  Return r = api_->gpm_alloc(&handle);
  if (r != kSuccess) return Answer<GpmSample>(r);
  GpmSample sample(this, handle);
  r = gpu_instance_id ? take_mig(DeviceOf(gpu), *gpu_instance_id, handle)
                      : api_->gpm_sample(DeviceOf(gpu), handle);
  if (r != kSuccess) return Answer<GpmSample>(r);
  return Answer<GpmSample>(kSuccess, std::move(sample));
}

Read<double> Library::GpmSmUtilPercent(const GpmSample& earlier, const GpmSample& later) const {
  if (!api_->gpm_metrics) return Missing<double>();
  GpmMetricsGet get{};
  get.version = kGpmMetricsGetVersion;
  get.num_metrics = 1;
  get.sample1 = static_cast<abi::GpmSampleHandle>(earlier.handle());
  get.sample2 = static_cast<abi::GpmSampleHandle>(later.handle());
  get.metrics[0].metric_id = kGpmMetricSmUtil;
  Return r = api_->gpm_metrics(&get);
  if (r == kSuccess) r = get.metrics[0].nvml_return;
  return Answer<double>(r, std::clamp(get.metrics[0].value, 0.0, 100.0));
}

void Library::FreeGpmSample(void* handle) const {
  if (handle && api_->gpm_free) api_->gpm_free(static_cast<abi::GpmSampleHandle>(handle));
}

GpmSample& GpmSample::operator=(GpmSample&& other) noexcept {
  if (this != &other) {
    if (owner_) owner_->FreeGpmSample(handle_);
    owner_ = other.owner_;
    handle_ = other.handle_;
    other.owner_ = nullptr;
    other.handle_ = nullptr;
  }
  return *this;
}

GpmSample::~GpmSample() {
  if (owner_) owner_->FreeGpmSample(handle_);
}

Status Library::WatchXids(const std::vector<Gpu>& gpus) {
  if (!api_->event_set_create || !api_->register_events || !api_->event_wait)
    return Unavailable("NVML has no event entry points");
  if (!api_->xid_set) {
    if (Return r = api_->event_set_create(&api_->xid_set); r != kSuccess)
      return api_->Fail("nvmlEventSetCreate", r);
  }
  int registered = 0;
  for (Gpu gpu : gpus)
    registered +=
        api_->register_events(DeviceOf(gpu), kEventTypeXidCriticalError, api_->xid_set) == kSuccess;
  if (registered == 0) return Unavailable("NVML: no GPU accepted Xid event registration");
  return Ok();
}

std::vector<XidEvent> Library::DrainXids(size_t max_events) const {
  std::vector<XidEvent> out;
  if (!api_->xid_set) return out;
  while (out.size() < max_events) {
    EventData data{};
    // A timeout of 0: what has arrived, without waiting (NVML answers TIMEOUT when none has).
    if (api_->event_wait(api_->xid_set, &data, 0) != kSuccess) break;
    if (data.event_type & kEventTypeXidCriticalError)
      out.push_back({data.device, data.event_data, data.gpu_instance_id});
  }
  return out;
}

}  // namespace tessera::nvml

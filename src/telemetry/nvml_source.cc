// The NVML side of a pass: one GpuReading per GPU. Every figure is read through the nvml module
// (dlopen); a figure the board lacks stays unset, a GPU that answers GPU_IS_LOST is marked lost
// and not read further in this pass. Each GPU is named as NVML names it (dcgm-exporter's
// modelName), and its sample period is taken from the spacing of the driver's own GPU
// utilisation samples (nvmlDeviceGetSamples), which come one per period, busy or not. MIG:
// per-instance memory and processes from each MIG device handle, SM use from GPM per GPU instance,
// and never a GPU utilisation for the GPU.
#include <time.h>

#include <algorithm>
#include <map>
#include <set>

#include "telemetry/telemetry.h"

namespace tessera::telemetry {
namespace {

// H100 and A100 (and their siblings) split into 7 compute slices.
constexpr double kBoardComputeSlices = 7.0;

int64_t WallMs() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1'000'000;
}

// The median spacing of distinct, increasing timestamps (0 with fewer than two).
uint64_t MedianSpacing(std::vector<uint64_t> times) {
  std::sort(times.begin(), times.end());
  std::vector<uint64_t> gaps;
  for (size_t i = 1; i < times.size(); ++i)
    if (times[i] > times[i - 1]) gaps.push_back(times[i] - times[i - 1]);
  if (gaps.empty()) return 0;
  std::nth_element(gaps.begin(), gaps.begin() + gaps.size() / 2, gaps.end());
  return gaps[gaps.size() / 2];
}

double ThreadCpuSeconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

class NvmlSource final : public GpuSource {
 public:
  NvmlSource(std::unique_ptr<nvml::Library> library, NvmlSourceOptions options)
      : library_(std::move(library)), options_(std::move(options)) {
    std::vector<nvml::Gpu> handles;
    for (auto& identity : options_.gpus) {
      auto gpu = library_->GpuByPci(identity.pci_address);
      handles_.push_back(gpu ? std::optional<nvml::Gpu>(*gpu) : std::nullopt);
      if (!gpu) continue;
      handles.push_back(*gpu);
      // dcgm-exporter's modelName is NVML's name; the inventory's stays where NVML has none.
      auto name = library_->Name(*gpu);
      if (name.ok() && !name.value.empty()) identity.model = name.value;
    }
    // Xid events, as the device plugin's health check watches them; without event support the
    // pass goes on without them.
    if (!handles.empty()) xids_ok_ = library_->WatchXids(handles).ok();
  }

  std::vector<GpuReading> Read(const Cursors& cursors) override {
    std::vector<GpuReading> out;
    out.reserve(options_.gpus.size());
    std::map<void*, size_t> by_handle;
    for (size_t i = 0; i < options_.gpus.size(); ++i) {
      GpuReading reading;
      reading.identity = options_.gpus[i];
      if (!handles_[i]) {
        reading.lost = true;
        reading.errors.push_back("NVML does not know this GPU");
      } else {
        by_handle[handles_[i]->handle()] = i;
        auto cursor = cursors.find(reading.identity.pci_address);
        ReadGpu(*handles_[i], cursor == cursors.end() ? GpuCursor{} : cursor->second, reading);
      }
      out.push_back(std::move(reading));
    }
    if (xids_ok_) {
      const double started = ThreadCpuSeconds();
      for (const auto& event : library_->DrainXids()) {
        auto it = by_handle.find(event.gpu);
        if (it != by_handle.end()) out[it->second].xids.push_back(event.xid);
      }
      if (!out.empty()) out.front().nvml_seconds += ThreadCpuSeconds() - started;
    }
    return out;
  }

 private:
  // One figure: unset unless it was read; a lost GPU ends the reading.
  template <typename T, typename Into>
  bool Take(const nvml::Read<T>& read, const char* what, GpuReading& reading, Into&& into) {
    switch (read.status) {
      case nvml::ReadStatus::kOk:
        into(read.value);
        return true;
      case nvml::ReadStatus::kGpuLost:
        reading.lost = true;
        return false;
      case nvml::ReadStatus::kNotSupported:
      case nvml::ReadStatus::kNotFound:
        return true;
      case nvml::ReadStatus::kFailed:
        reading.errors.push_back(std::string(what) + ": NVML error " + std::to_string(read.code));
        return true;
    }
    return true;
  }

  void ReadGpu(nvml::Gpu gpu, const GpuCursor& cursor, GpuReading& reading) {
    const double started = ThreadCpuSeconds();
    std::vector<std::vector<nvml::ProcessMemory>> lists;
    const std::string& pci = reading.identity.pci_address;
    auto read_all = [&]() -> bool {
      if (reading.identity.uuid.empty() &&
          !Take(library_->Uuid(gpu), "uuid", reading,
                [&](const std::string& uuid) { reading.identity.uuid = uuid; }))
        return false;
      auto mig = library_->GetMigMode(gpu);
      reading.mig = mig && *mig && (*mig)->current;
      if (!reading.mig && !Take(library_->UtilizationRates(gpu), "utilization", reading,
                                [&](const nvml::Utilization& u) {
                                  reading.gpu_percent = u.gpu_percent;
                                  reading.memory_percent = u.memory_percent;
                                }))
        return false;
      if (!Take(library_->Memory(gpu), "memory", reading, [&](const nvml::MemoryInfo& m) {
            reading.memory_used = m.used;
            reading.memory_total = m.total;
          }))
        return false;
      if (!Take(library_->PowerMilliwatts(gpu), "power", reading,
                [&](uint32_t mw) { reading.power_mw = mw; }))
        return false;
      if (!Take(library_->PowerLimitMilliwatts(gpu), "power limit", reading,
                [&](uint32_t mw) { reading.power_limit_mw = mw; }))
        return false;
      reading.read_ms = WallMs();
      if (!Take(library_->TotalEnergyMillijoules(gpu), "energy", reading,
                [&](uint64_t mj) { reading.energy_mj = mj; }))
        return false;
      if (!Take(library_->TemperatureCelsius(gpu), "temperature", reading,
                [&](uint32_t c) { reading.temperature_c = c; }))
        return false;
      for (bool mps : {false, true}) {
        if (!Take(library_->ComputeProcesses(gpu, mps, options_.max_processes_per_gpu),
                  mps ? "MPS processes" : "processes", reading,
                  [&](const std::vector<nvml::ProcessMemory>& list) { lists.push_back(list); }))
          return false;
      }
      if (reading.mig) return ReadMig(gpu, reading, lists);
      if (!ReadSamplePeriod(gpu, reading)) return false;
      if (!Take(library_->ProcessUtilizations(gpu, cursor.sample_us), "process utilization",
                reading, [&](const std::vector<nvml::ProcessUtilization>& samples) {
                  reading.samples = samples;
                }))
        return false;
      return ReadAccounting(gpu, pci, lists, reading);
    };
    read_all();
    reading.nvml_seconds += ThreadCpuSeconds() - started;
    reading.processes = MergeProcessLists(lists, options_.max_processes_per_gpu);
  }

  bool ReadMig(nvml::Gpu gpu, GpuReading& reading,
               std::vector<std::vector<nvml::ProcessMemory>>& lists) {
    auto devices = library_->MigDevices(gpu);
    if (!devices) {
      reading.errors.push_back(devices.error().message);
      return true;
    }
    const std::string& pci = reading.identity.pci_address;
    const bool gpm = library_->GpmSupported(gpu).value;
    auto& profiles = profile_names_[pci];
    for (const auto& device : *devices) {
      if (profiles.count(device.gpu_instance_id)) continue;
      profiles = ProfileNames(gpu);  // a new layout: once per pass at most
      break;
    }
    for (const auto& device : *devices) {
      MigInstanceReading instance;
      instance.gpu_instance_id = device.gpu_instance_id;
      instance.compute_instance_id = device.compute_instance_id;
      instance.uuid = device.uuid;
      instance.memory_total = device.memory_bytes;
      instance.share = device.gpu_instance_slices / kBoardComputeSlices;
      if (auto name = profiles.find(device.gpu_instance_id); name != profiles.end())
        instance.profile = name->second;
      auto handle = library_->MigDeviceHandle(gpu, device.index);
      if (handle.ok()) {
        // Per-instance memory comes from the MIG device handle, as do its processes.
        if (!Take(library_->Memory(handle.value), "MIG memory", reading,
                  [&](const nvml::MemoryInfo& m) {
                    instance.memory_used = m.used;
                    if (m.total) instance.memory_total = m.total;
                  }))
          return false;
        for (bool mps : {false, true}) {
          if (!Take(library_->ComputeProcesses(handle.value, mps, options_.max_processes_per_gpu),
                    "MIG processes", reading, [&](const std::vector<nvml::ProcessMemory>& list) {
                      lists.push_back(list);
                      // A MIG handle's list is that instance's, whatever the IDs it carries.
                      for (auto& process : lists.back()) {
                        process.gpu_instance_id = device.gpu_instance_id;
                        process.compute_instance_id = device.compute_instance_id;
                      }
                    }))
            return false;
        }
      }
      // GPM's SM utilisation of the GPU instance between the previous pass's sample and now.
      if (gpm) {
        auto sample = library_->TakeGpmSample(gpu, device.gpu_instance_id);
        if (sample.ok()) {
          auto& previous = gpm_samples_[{pci, device.gpu_instance_id}];
          if (previous) {
            auto sm = library_->GpmSmUtilPercent(previous, sample.value);
            if (sm.ok()) instance.sm_percent = sm.value;
          }
          previous = std::move(sample.value);
        } else if (sample.status == nvml::ReadStatus::kGpuLost) {
          reading.lost = true;
          return false;
        }
      }
      reading.mig_instances.push_back(std::move(instance));
    }
    return true;
  }

  // The driver's sample period from its GPU utilisation samples since the last pass's newest
  // (that one included, so two passes one period apart still give a spacing); the last known
  // period while no new ones come.
  bool ReadSamplePeriod(nvml::Gpu gpu, GpuReading& reading) {
    auto& known = periods_[reading.identity.pci_address];
    auto times = library_->UtilizationSampleTimes(gpu, known.newest_us);
    if (times.status == nvml::ReadStatus::kGpuLost) {
      reading.lost = true;
      return false;
    }
    if (times.ok() && !times.value.empty()) {
      if (known.newest_us) times.value.push_back(known.newest_us);
      known.newest_us = *std::max_element(times.value.begin(), times.value.end());
      if (uint64_t spacing = MedianSpacing(std::move(times.value)); spacing > 0)
        known.period_us = spacing;
    }
    reading.sample_period_us = known.period_us;
    return true;
  }

  // GPU instance ID -> its profile's name ("1g.10gb"); asked again only when the layout changed.
  std::map<uint32_t, std::string> ProfileNames(nvml::Gpu gpu) const {
    std::map<uint32_t, std::string> out;
    auto profiles = library_->Profiles(gpu);
    auto instances = library_->GpuInstances(gpu);
    if (!profiles || !instances) return out;
    for (const auto& instance : *instances)
      for (const auto& profile : *profiles)
        if (profile.id == instance.profile_id) out[instance.id] = profile.name;
    return out;
  }

  // Accounting mode: the records of processes that ended, each handed out once per collector
  // (the integration counts only those that ended since the cursor's pass).
  bool ReadAccounting(nvml::Gpu gpu, const std::string& pci,
                      const std::vector<std::vector<nvml::ProcessMemory>>& lists,
                      GpuReading& reading) {
    auto enabled = library_->AccountingEnabled(gpu);
    if (!enabled.ok() || !enabled.value) return enabled.status != nvml::ReadStatus::kGpuLost;
    auto pids = library_->AccountingPids(gpu);
    if (!pids.ok()) return pids.status != nvml::ReadStatus::kGpuLost;
    std::set<uint32_t> running;
    for (const auto& list : lists)
      for (const auto& process : list)
        running.insert(process.pid);
    auto& reported = accounted_[pci];
    std::set<uint32_t> listed;
    for (uint32_t pid : pids.value) {
      listed.insert(pid);
      if (running.count(pid) || reported.count(pid)) continue;
      auto stats = library_->Accounting(gpu, pid);
      if (stats.status == nvml::ReadStatus::kGpuLost) return false;
      if (!stats.ok() || stats.value.running) continue;
      reported.insert(pid);
      reading.ended.push_back(stats.value);
    }
    // The driver's buffer is circular: forget PIDs it no longer lists.
    std::erase_if(reported, [&](uint32_t pid) { return !listed.count(pid); });
    return true;
  }

  std::unique_ptr<nvml::Library> library_;
  NvmlSourceOptions options_;
  std::vector<std::optional<nvml::Gpu>> handles_;
  bool xids_ok_ = false;
  std::map<std::pair<std::string, uint32_t>, nvml::GpmSample> gpm_samples_;
  std::map<std::string, std::set<uint32_t>> accounted_;
  struct Period {
    uint64_t newest_us = 0;  // the newest GPU utilisation sample seen
    uint64_t period_us = 0;
  };
  std::map<std::string, Period> periods_;                                 // by PCI address
  std::map<std::string, std::map<uint32_t, std::string>> profile_names_;  // by PCI address
};

}  // namespace

Result<std::unique_ptr<GpuSource>> OpenNvmlSource(const NvmlSourceOptions& options) {
  auto library = nvml::Library::Open(options.library);
  if (!library) return library.error();
  return std::unique_ptr<GpuSource>(new NvmlSource(std::move(*library), options));
}

}  // namespace tessera::telemetry

// Loading NVML and the MIG calls. Every entry point is looked up once at Open; a query whose
// entry point the installed driver lacks answers Unavailable naming it.
#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstring>

#include "nvml/library_api.h"
#include "nvml/nvml.h"

namespace tessera::nvml {

using namespace abi;

namespace {

std::string ProfileName(const char* raw) {
  std::string name(raw, strnlen(raw, kDeviceNameV2BufferSize));
  if (name.rfind("MIG ", 0) == 0) name.erase(0, 4);
  return name;
}

// Without the V entry point the name is rebuilt from the slice and memory sizes, the way NVIDIA
// names profiles ("<compute slices>g.<memory GB>gb"): memory rounds up to whole GB.
std::string DerivedProfileName(const GpuInstanceProfileInfo& info) {
  uint64_t gb = (info.memory_size_mb + 1023) / 1024;
  return std::to_string(info.slice_count) + "g." + std::to_string(gb) + "gb";
}

}  // namespace

Library::Library(std::unique_ptr<Api> api) : api_(std::move(api)) {}
Library::~Library() = default;

Status CheckLibraryPath(const std::string& path) {
  // A bare name is looked up by the dynamic loader in the system's library directories, which
  // only root writes; a path is the operator's and is looked at first. stat() follows links and
  // never blocks, where dlopen's open() of a FIFO waits for a writer forever. A path that does
  // not exist is dlopen's to report (Unavailable: no driver here), as before.
  if (path.find('/') == std::string::npos) return Ok();
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return Ok();
  if (!S_ISREG(st.st_mode)) return InvalidArgument("NVML library " + path + ": not a regular file");
  return Ok();
}

Result<std::unique_ptr<Library>> Library::Open(const std::string& path) {
  if (auto checked = CheckLibraryPath(path); !checked) return checked.error();
  auto api = std::make_unique<Api>();
  api->handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!api->handle) {
    const char* why = ::dlerror();
    return Unavailable("dlopen " + path + ": " + (why ? why : "failed"));
  }
  void* h = api->handle;
  Bind(h, api->init, "nvmlInit_v2");
  Bind(h, api->shutdown, "nvmlShutdown");
  Bind(h, api->error_string, "nvmlErrorString");
  Bind(h, api->by_pci, "nvmlDeviceGetHandleByPciBusId_v2");
  Bind(h, api->get_mig_mode, "nvmlDeviceGetMigMode");
  Bind(h, api->set_mig_mode, "nvmlDeviceSetMigMode");
  Bind(h, api->profile_info_v, "nvmlDeviceGetGpuInstanceProfileInfoV");
  Bind(h, api->profile_info, "nvmlDeviceGetGpuInstanceProfileInfo");
  Bind(h, api->get_gpu_instances, "nvmlDeviceGetGpuInstances");
  Bind(h, api->gpu_instance_by_id, "nvmlDeviceGetGpuInstanceById");
  Bind(h, api->gpu_instance_info, "nvmlGpuInstanceGetInfo");
  Bind(h, api->ci_profile_info, "nvmlGpuInstanceGetComputeInstanceProfileInfo");
  Bind(h, api->get_compute_instances, "nvmlGpuInstanceGetComputeInstances");
  Bind(h, api->compute_instance_info, "nvmlComputeInstanceGetInfo_v2");
  Bind(h, api->create_gpu_instance, "nvmlDeviceCreateGpuInstanceWithPlacement");
  Bind(h, api->create_compute_instance, "nvmlGpuInstanceCreateComputeInstance");
  Bind(h, api->destroy_gpu_instance, "nvmlGpuInstanceDestroy");
  Bind(h, api->destroy_compute_instance, "nvmlComputeInstanceDestroy");
  Bind(h, api->max_mig_devices, "nvmlDeviceGetMaxMigDeviceCount");
  Bind(h, api->mig_by_index, "nvmlDeviceGetMigDeviceHandleByIndex");
  Bind(h, api->gpu_instance_id, "nvmlDeviceGetGpuInstanceId");
  Bind(h, api->compute_instance_id, "nvmlDeviceGetComputeInstanceId");
  Bind(h, api->uuid, "nvmlDeviceGetUUID");
  Bind(h, api->memory, "nvmlDeviceGetMemoryInfo");
  Bind(h, api->attributes, "nvmlDeviceGetAttributes_v2");
  Bind(h, api->running_processes, "nvmlDeviceGetComputeRunningProcesses_v3");
  Bind(h, api->get_compute_mode, "nvmlDeviceGetComputeMode");
  Bind(h, api->set_compute_mode, "nvmlDeviceSetComputeMode");
  Bind(h, api->module_id, "nvmlDeviceGetModuleId");
  BindTelemetry(*api);
  BindHealth(*api);
  if (!api->init || !api->shutdown || !api->by_pci) {
    return Unavailable(path + ": missing NVML entry points (not the NVIDIA management library?)");
  }
  if (Return r = api->init(); r != kSuccess) return Unavailable(api->Describe("nvmlInit_v2", r));
  api->initialized = true;
  return std::unique_ptr<Library>(new Library(std::move(api)));
}

Result<Gpu> Library::GpuByPci(const std::string& pci_address) const {
  Device device = nullptr;
  // NVML accepts the sysfs form; it prints the 8-digit domain form itself.
  if (Return r = api_->by_pci(pci_address.c_str(), &device); r != kSuccess) {
    return api_->Fail("nvmlDeviceGetHandleByPciBusId_v2", r).WithContext(pci_address);
  }
  return Gpu(device);
}

Result<std::optional<MigMode>> Library::GetMigMode(Gpu gpu) const {
  if (auto s = api_->Need(api_->get_mig_mode, "nvmlDeviceGetMigMode"); !s) return s.error();
  unsigned int current = 0, pending = 0;
  Return r = api_->get_mig_mode(static_cast<Device>(gpu.handle()), &current, &pending);
  if (r == kErrorNotSupported) return std::optional<MigMode>();
  if (r != kSuccess) return api_->Fail("nvmlDeviceGetMigMode", r);
  return std::optional<MigMode>(MigMode{current == kMigEnable, pending == kMigEnable});
}

Result<std::vector<GpuInstanceProfile>> Library::Profiles(Gpu gpu) const {
  auto device = static_cast<Device>(gpu.handle());
  if (!api_->profile_info_v && !api_->profile_info) {
    return Unavailable("NVML has no nvmlDeviceGetGpuInstanceProfileInfo");
  }
  std::vector<GpuInstanceProfile> profiles;
  for (unsigned int index = 0; index < kGpuInstanceProfileCount; ++index) {
    GpuInstanceProfile profile;
    profile.index = index;
    if (api_->profile_info_v) {
      GpuInstanceProfileInfoV2 info{};
      info.version = kGpuInstanceProfileInfoV2Version;
      Return r = api_->profile_info_v(device, index, &info);
      if (r == kErrorNotSupported || r == kErrorInvalidArgument) continue;  // not on this board
      if (r != kSuccess) return api_->Fail("nvmlDeviceGetGpuInstanceProfileInfoV", r);
      profile.id = info.id;
      profile.name = ProfileName(info.name);
      profile.slice_count = info.slice_count;
      profile.instance_count = info.instance_count;
      profile.multiprocessors = info.multiprocessor_count;
      profile.memory_mb = info.memory_size_mb;
    } else {
      GpuInstanceProfileInfo info{};
      Return r = api_->profile_info(device, index, &info);
      if (r == kErrorNotSupported || r == kErrorInvalidArgument) continue;
      if (r != kSuccess) return api_->Fail("nvmlDeviceGetGpuInstanceProfileInfo", r);
      profile.id = info.id;
      profile.name = DerivedProfileName(info);
      profile.slice_count = info.slice_count;
      profile.instance_count = info.instance_count;
      profile.multiprocessors = info.multiprocessor_count;
      profile.memory_mb = info.memory_size_mb;
    }
    profiles.push_back(std::move(profile));
  }
  return profiles;
}

namespace {

// Compute instances of one GPU instance, over every compute-instance profile.
Result<std::vector<std::pair<uint32_t, ComputeInstanceHandle>>> ComputeInstancesOf(
    const Library::Api& api, GpuInstanceHandle instance) {
  std::vector<std::pair<uint32_t, ComputeInstanceHandle>> out;
  if (!api.ci_profile_info || !api.get_compute_instances || !api.compute_instance_info) {
    return Unavailable("NVML has no compute-instance entry points");
  }
  for (unsigned int index = 0; index < kComputeInstanceProfileCount; ++index) {
    ComputeInstanceProfileInfo info{};
    Return r = api.ci_profile_info(instance, index, kComputeInstanceEngineProfileShared, &info);
    if (r != kSuccess || info.instance_count == 0) continue;
    std::vector<ComputeInstanceHandle> handles(std::min(info.instance_count, 64u));
    unsigned int count = 0;
    r = api.get_compute_instances(instance, info.id, handles.data(), &count);
    if (r != kSuccess) return api.Fail("nvmlGpuInstanceGetComputeInstances", r);
    for (unsigned int i = 0; i < std::min<unsigned int>(count, handles.size()); ++i) {
      ComputeInstanceInfo ci{};
      r = api.compute_instance_info(handles[i], &ci);
      if (r != kSuccess) return api.Fail("nvmlComputeInstanceGetInfo_v2", r);
      out.push_back({ci.id, handles[i]});
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

}  // namespace

Result<std::vector<GpuInstance>> Library::GpuInstances(Gpu gpu) const {
  auto device = static_cast<Device>(gpu.handle());
  if (!api_->get_gpu_instances || !api_->gpu_instance_info) {
    return Unavailable("NVML has no nvmlDeviceGetGpuInstances");
  }
  auto profiles = Profiles(gpu);
  if (!profiles) return profiles.error();
  std::vector<GpuInstance> out;
  for (const GpuInstanceProfile& profile : *profiles) {
    if (profile.instance_count == 0) continue;
    std::vector<GpuInstanceHandle> handles(std::min(profile.instance_count, 64u));
    unsigned int count = 0;
    Return r = api_->get_gpu_instances(device, profile.id, handles.data(), &count);
    if (r != kSuccess) return api_->Fail("nvmlDeviceGetGpuInstances", r);
    for (unsigned int i = 0; i < std::min<unsigned int>(count, handles.size()); ++i) {
      GpuInstanceInfo info{};
      r = api_->gpu_instance_info(handles[i], &info);
      if (r != kSuccess) return api_->Fail("nvmlGpuInstanceGetInfo", r);
      GpuInstance instance;
      instance.id = info.id;
      instance.profile_id = info.profile_id;
      instance.placement = {info.placement.start, info.placement.size};
      auto cis = ComputeInstancesOf(*api_, handles[i]);
      if (!cis) return cis.error();
      for (const auto& [id, handle] : *cis)
        instance.compute_instance_ids.push_back(id);
      out.push_back(std::move(instance));
    }
  }
  std::sort(out.begin(), out.end(),
            [](const GpuInstance& a, const GpuInstance& b) { return a.id < b.id; });
  return out;
}

Result<std::vector<MigDevice>> Library::MigDevices(Gpu gpu) const {
  auto device = static_cast<Device>(gpu.handle());
  for (auto [entry, name] :
       {std::pair<const void*, const char*>{reinterpret_cast<const void*>(api_->max_mig_devices),
                                            "nvmlDeviceGetMaxMigDeviceCount"},
        {reinterpret_cast<const void*>(api_->mig_by_index), "nvmlDeviceGetMigDeviceHandleByIndex"},
        {reinterpret_cast<const void*>(api_->gpu_instance_id), "nvmlDeviceGetGpuInstanceId"},
        {reinterpret_cast<const void*>(api_->compute_instance_id),
         "nvmlDeviceGetComputeInstanceId"},
        {reinterpret_cast<const void*>(api_->uuid), "nvmlDeviceGetUUID"}}) {
    if (entry == nullptr) return Unavailable(std::string("NVML has no ") + name);
  }
  unsigned int max = 0;
  if (Return r = api_->max_mig_devices(device, &max); r != kSuccess) {
    return api_->Fail("nvmlDeviceGetMaxMigDeviceCount", r);
  }
  std::vector<MigDevice> out;
  for (unsigned int index = 0; index < std::min(max, 64u); ++index) {
    Device mig = nullptr;
    Return r = api_->mig_by_index(device, index, &mig);
    if (r == kErrorNotFound) continue;  // a hole: that slot has no MIG device
    if (r != kSuccess) return api_->Fail("nvmlDeviceGetMigDeviceHandleByIndex", r);
    MigDevice info;
    info.index = index;
    if ((r = api_->gpu_instance_id(mig, &info.gpu_instance_id)) != kSuccess)
      return api_->Fail("nvmlDeviceGetGpuInstanceId", r);
    if ((r = api_->compute_instance_id(mig, &info.compute_instance_id)) != kSuccess)
      return api_->Fail("nvmlDeviceGetComputeInstanceId", r);
    char uuid[kDeviceUuidBufferSize] = {};
    if ((r = api_->uuid(mig, uuid, sizeof uuid)) != kSuccess)
      return api_->Fail("nvmlDeviceGetUUID", r);
    info.uuid.assign(uuid, strnlen(uuid, sizeof uuid));
    if (api_->memory) {
      abi::Memory memory{};
      if (api_->memory(mig, &memory) == kSuccess) info.memory_bytes = memory.total;
    }
    if (api_->attributes) {
      DeviceAttributes attributes{};
      if (api_->attributes(mig, &attributes) == kSuccess) {
        info.multiprocessors = attributes.multiprocessor_count;
        info.gpu_instance_slices = attributes.gpu_instance_slice_count;
        info.compute_instance_slices = attributes.compute_instance_slice_count;
        if (info.memory_bytes == 0) info.memory_bytes = attributes.memory_size_mb << 20;
      }
    }
    out.push_back(std::move(info));
  }
  return out;
}

Result<uint64_t> Library::MemoryTotal(Gpu gpu) const {
  if (auto s = api_->Need(api_->memory, "nvmlDeviceGetMemoryInfo"); !s) return s.error();
  abi::Memory memory{};
  Return r = api_->memory(static_cast<Device>(gpu.handle()), &memory);
  if (r != kSuccess) return api_->Fail("nvmlDeviceGetMemoryInfo", r);
  return static_cast<uint64_t>(memory.total);
}

Result<std::optional<uint32_t>> Library::ModuleId(Gpu gpu) const {
  if (auto s = api_->Need(api_->module_id, "nvmlDeviceGetModuleId"); !s) return s.error();
  unsigned int id = 0;
  Return r = api_->module_id(static_cast<Device>(gpu.handle()), &id);
  if (r == kErrorNotSupported) return std::optional<uint32_t>();
  if (r != kSuccess) return api_->Fail("nvmlDeviceGetModuleId", r);
  return std::optional<uint32_t>(id);
}

Result<uint32_t> Library::RunningProcessCount(Gpu gpu) const {
  if (auto s = api_->Need(api_->running_processes, "nvmlDeviceGetComputeRunningProcesses_v3"); !s) {
    return s.error();
  }
  auto count_on = [&](Device device) -> Result<uint32_t> {
    unsigned int count = 0;
    Return r = api_->running_processes(device, &count, nullptr);
    if (r == kSuccess || r == kErrorInsufficientSize) return count;
    return api_->Fail("nvmlDeviceGetComputeRunningProcesses_v3", r);
  };
  auto total = count_on(static_cast<Device>(gpu.handle()));
  if (!total) return total;
  uint32_t sum = *total;
  // In MIG mode the parent may list only its own processes; each MIG device lists its own.
  if (api_->max_mig_devices && api_->mig_by_index) {
    unsigned int max = 0;
    if (api_->max_mig_devices(static_cast<Device>(gpu.handle()), &max) == kSuccess) {
      for (unsigned int index = 0; index < std::min(max, 64u); ++index) {
        Device mig = nullptr;
        if (api_->mig_by_index(static_cast<Device>(gpu.handle()), index, &mig) != kSuccess)
          continue;
        auto on_mig = count_on(mig);
        if (!on_mig) return on_mig;
        sum += *on_mig;
      }
    }
  }
  return sum;
}

Result<bool> Library::SetMigMode(Gpu gpu, bool enabled) const {
  if (auto s = api_->Need(api_->set_mig_mode, "nvmlDeviceSetMigMode"); !s) return s.error();
  Return activation = kSuccess;
  Return r = api_->set_mig_mode(static_cast<Device>(gpu.handle()),
                                enabled ? kMigEnable : kMigDisable, &activation);
  if (r != kSuccess) return api_->Fail("nvmlDeviceSetMigMode", r);
  // The call records the pending mode; activation fails (in use / reset required) until the
  // GPU is reset.
  return activation == kSuccess;
}

Result<uint32_t> Library::CreateGpuInstance(Gpu gpu, uint32_t profile_id,
                                            Placement placement) const {
  auto device = static_cast<Device>(gpu.handle());
  if (!api_->create_gpu_instance || !api_->create_compute_instance || !api_->ci_profile_info ||
      !api_->gpu_instance_info || !api_->destroy_gpu_instance) {
    return Unavailable("NVML has no instance-creation entry points");
  }
  auto profiles = Profiles(gpu);
  if (!profiles) return profiles.error();
  auto profile = std::find_if(profiles->begin(), profiles->end(),
                              [&](const GpuInstanceProfile& p) { return p.id == profile_id; });
  if (profile == profiles->end()) {
    return NotFound("GPU instance profile ID " + std::to_string(profile_id) +
                    " is not offered by this GPU");
  }
  GpuInstancePlacement where{placement.start, placement.size};
  GpuInstanceHandle instance = nullptr;
  Return r = api_->create_gpu_instance(device, profile_id, &where, &instance);
  if (r != kSuccess) return api_->Fail("nvmlDeviceCreateGpuInstanceWithPlacement", r);
  GpuInstanceInfo info{};
  if ((r = api_->gpu_instance_info(instance, &info)) != kSuccess) {
    return api_->Fail("nvmlGpuInstanceGetInfo", r);
  }
  // One compute instance spanning the whole GPU instance: the profile with as many compute
  // slices as the GPU instance has.
  for (unsigned int index = 0; index < kComputeInstanceProfileCount; ++index) {
    ComputeInstanceProfileInfo ci{};
    if (api_->ci_profile_info(instance, index, kComputeInstanceEngineProfileShared, &ci) !=
            kSuccess ||
        ci.slice_count != profile->slice_count) {
      continue;
    }
    ComputeInstanceHandle created = nullptr;
    r = api_->create_compute_instance(instance, ci.id, &created);
    if (r == kSuccess) return info.id;
    Error failed = api_->Fail("nvmlGpuInstanceCreateComputeInstance", r);
    api_->destroy_gpu_instance(instance);  // no half-made slice left behind
    return failed;
  }
  api_->destroy_gpu_instance(instance);
  return NotFound("no compute-instance profile spans a " + profile->name + " GPU instance");
}

Status Library::DestroyGpuInstance(Gpu gpu, uint32_t gpu_instance_id) const {
  if (!api_->gpu_instance_by_id || !api_->destroy_gpu_instance || !api_->destroy_compute_instance) {
    return Unavailable("NVML has no instance-destruction entry points");
  }
  GpuInstanceHandle instance = nullptr;
  Return r =
      api_->gpu_instance_by_id(static_cast<Device>(gpu.handle()), gpu_instance_id, &instance);
  if (r != kSuccess) return api_->Fail("nvmlDeviceGetGpuInstanceById", r);
  auto cis = ComputeInstancesOf(*api_, instance);
  if (!cis) return cis.error();
  for (const auto& [id, handle] : *cis) {
    if ((r = api_->destroy_compute_instance(handle)) != kSuccess) {
      return api_->Fail("nvmlComputeInstanceDestroy", r);
    }
  }
  if ((r = api_->destroy_gpu_instance(instance)) != kSuccess) {
    return api_->Fail("nvmlGpuInstanceDestroy", r);
  }
  return Ok();
}

const char* ComputeModeName(ComputeMode mode) {
  switch (mode) {
    case ComputeMode::kDefault:
      return "DEFAULT";
    case ComputeMode::kExclusiveThread:
      return "EXCLUSIVE_THREAD";
    case ComputeMode::kProhibited:
      return "PROHIBITED";
    case ComputeMode::kExclusiveProcess:
      return "EXCLUSIVE_PROCESS";
  }
  return "UNKNOWN";
}

Result<ComputeMode> Library::GetComputeMode(Gpu gpu) const {
  if (auto s = api_->Need(api_->get_compute_mode, "nvmlDeviceGetComputeMode"); !s) return s.error();
  unsigned int mode = 0;
  if (Return r = api_->get_compute_mode(static_cast<Device>(gpu.handle()), &mode); r != kSuccess)
    return api_->Fail("nvmlDeviceGetComputeMode", r);
  if (mode > static_cast<unsigned int>(ComputeMode::kExclusiveProcess))
    return Internal("nvmlDeviceGetComputeMode: unknown mode " + std::to_string(mode));
  return static_cast<ComputeMode>(mode);
}

Status Library::SetComputeMode(Gpu gpu, ComputeMode mode) const {
  if (auto s = api_->Need(api_->set_compute_mode, "nvmlDeviceSetComputeMode"); !s) return s;
  if (Return r = api_->set_compute_mode(static_cast<Device>(gpu.handle()),
                                        static_cast<unsigned int>(mode));
      r != kSuccess)
    return api_->Fail("nvmlDeviceSetComputeMode", r).WithContext(ComputeModeName(mode));
  return Ok();
}

}  // namespace tessera::nvml

// Health probes: presence of each device's sysfs entry and device nodes, and critical Xid events
// from NVML. NVML is loaded with dlopen at run time only: the plugin must start (and still watch
// presence and leases) on nodes without the NVIDIA driver, and must not link it at build time.
#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>

#include "deviceplugin/deviceplugin.h"

namespace tessera::deviceplugin {

std::string PresenceKey(const PhysicalDevice& device) {
  return device.mig ? device.pci_address + "#" + device.id : device.pci_address;
}

std::map<std::string, bool> ProbePresence(const std::vector<PhysicalDevice>& devices) {
  std::map<std::string, bool> out;
  for (const auto& device : devices) {
    bool present = true;
    for (const auto& path : device.watch_paths) {
      struct stat st;
      // stat follows the sysfs symlink: a dangling link is a removed device.
      if (::stat(path.c_str(), &st) != 0) {
        present = false;
        break;
      }
    }
    out[PresenceKey(device)] = present;
  }
  return out;
}

// ---- NVML (ABI subset from nvml.h; stable since the _v2 entry points, CUDA 5) ----

// Named rather than anonymous: the types below are members of a class with linkage, which
// -Wsubobject-linkage rejects for anonymous types once unity builds include this file.
namespace xid_watcher_detail {

using NvmlReturn = int;
using NvmlDevice = struct NvmlDeviceOpaque*;
using NvmlEventSet = struct NvmlEventSetOpaque*;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr unsigned long long kNvmlEventTypeXidCriticalError = 0x0000000000000008ULL;

struct NvmlEventData {
  NvmlDevice device;
  unsigned long long event_type;
  unsigned long long event_data;  // the Xid
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};

struct NvmlPciInfo {
  char bus_id_legacy[16];
  unsigned int domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];  // "00000000:18:00.0"
};

// "00000000:18:00.0" (NVML) -> "0000:18:00.0" (sysfs), lowercase.
std::string CanonicalPci(const char* nvml_bus_id) {
  std::string s = nvml_bus_id;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (s.size() == 16 && s.rfind("0000", 0) == 0) s = s.substr(4);
  return s;
}

}  // namespace xid_watcher_detail
using namespace xid_watcher_detail;

struct XidWatcher::Impl {
  void* library = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  NvmlReturn (*wait)(NvmlEventSet, NvmlEventData*, unsigned int) = nullptr;
  NvmlReturn (*free_set)(NvmlEventSet) = nullptr;
  NvmlReturn (*pci_info)(NvmlDevice, NvmlPciInfo*) = nullptr;
  NvmlEventSet set = nullptr;
  bool initialized = false;

  ~Impl() {
    if (set && free_set) free_set(set);
    if (initialized && shutdown) shutdown();
    if (library) ::dlclose(library);
  }
};

Result<std::unique_ptr<XidWatcher>> XidWatcher::Start(const std::string& library,
                                                      const std::vector<PhysicalDevice>& devices) {
  auto impl = std::make_unique<Impl>();
  impl->library = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!impl->library) {
    const char* why = ::dlerror();
    return Unavailable("dlopen " + library + ": " + (why ? why : "failed"));
  }
  auto symbol = [&](const char* name) { return ::dlsym(impl->library, name); };
  auto init = reinterpret_cast<NvmlReturn (*)()>(symbol("nvmlInit_v2"));
  auto by_pci = reinterpret_cast<NvmlReturn (*)(const char*, NvmlDevice*)>(
      symbol("nvmlDeviceGetHandleByPciBusId_v2"));
  auto create = reinterpret_cast<NvmlReturn (*)(NvmlEventSet*)>(symbol("nvmlEventSetCreate"));
  auto register_events =
      reinterpret_cast<NvmlReturn (*)(NvmlDevice, unsigned long long, NvmlEventSet)>(
          symbol("nvmlDeviceRegisterEvents"));
  impl->shutdown = reinterpret_cast<NvmlReturn (*)()>(symbol("nvmlShutdown"));
  impl->wait = reinterpret_cast<NvmlReturn (*)(NvmlEventSet, NvmlEventData*, unsigned int)>(
      symbol("nvmlEventSetWait_v2"));
  impl->free_set = reinterpret_cast<NvmlReturn (*)(NvmlEventSet)>(symbol("nvmlEventSetFree"));
  impl->pci_info =
      reinterpret_cast<NvmlReturn (*)(NvmlDevice, NvmlPciInfo*)>(symbol("nvmlDeviceGetPciInfo_v3"));
  if (!init || !by_pci || !create || !register_events || !impl->shutdown || !impl->wait ||
      !impl->free_set || !impl->pci_info) {
    return Unavailable(library +
                       ": missing NVML entry points (not the NVIDIA management library?)");
  }
  if (NvmlReturn r = init(); r != kNvmlSuccess) {
    return Unavailable("nvmlInit_v2 failed with NVML error " + std::to_string(r));
  }
  impl->initialized = true;
  if (NvmlReturn r = create(&impl->set); r != kNvmlSuccess) {
    return Unavailable("nvmlEventSetCreate failed with NVML error " + std::to_string(r));
  }
  int registered = 0;
  for (const auto& device : devices) {
    if (device.driver != "nvidia") continue;
    NvmlDevice handle = nullptr;
    if (by_pci(device.pci_address.c_str(), &handle) != kNvmlSuccess) continue;
    if (register_events(handle, kNvmlEventTypeXidCriticalError, impl->set) == kNvmlSuccess) {
      ++registered;
    }
  }
  if (registered == 0) return Unavailable("NVML: no GPU accepted Xid event registration");
  return std::unique_ptr<XidWatcher>(new XidWatcher(std::move(impl)));
}

XidWatcher::XidWatcher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
XidWatcher::~XidWatcher() = default;

std::optional<XidWatcher::Event> XidWatcher::Wait(int timeout_ms) {
  NvmlEventData data{};
  if (impl_->wait(impl_->set, &data, static_cast<unsigned int>(timeout_ms)) != kNvmlSuccess) {
    return std::nullopt;  // NVML_ERROR_TIMEOUT or a transient error: the caller loops
  }
  if (!(data.event_type & kNvmlEventTypeXidCriticalError)) return std::nullopt;
  NvmlPciInfo info{};
  if (impl_->pci_info(data.device, &info) != kNvmlSuccess) return std::nullopt;
  return Event{CanonicalPci(info.bus_id), data.event_data};
}

}  // namespace tessera::deviceplugin

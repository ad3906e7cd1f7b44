// Loading libnvfm.so.1 once per process, and the deadline around each call into it.
#include "fabricmanager/nvfm_library.h"

#include <dlfcn.h>

#include <condition_variable>
#include <map>
#include <system_error>
#include <thread>

#include "fabricmanager/fabricmanager.h"

namespace tessera::fabricmanager {
namespace {

using Clock = std::chrono::steady_clock;

template <typename Fn>
Status Resolve(void* library, const std::string& name, const char* symbol, Fn* out) {
  dlerror();
  void* address = dlsym(library, symbol);
  if (const char* error = dlerror(); error != nullptr || address == nullptr) {
    return Unavailable(name + ": function " + symbol + " is missing (" +
                       (error ? error : "null symbol") + "); not a Fabric Manager client library");
  }
  *out = reinterpret_cast<Fn>(address);
  return Ok();
}

Result<NvfmApi> ResolveAll(void* library, const std::string& name) {
  NvfmApi api;
  for (Status resolved :
       {Resolve(library, name, "fmLibInit", &api.lib_init),
        Resolve(library, name, "fmLibShutdown", &api.lib_shutdown),
        Resolve(library, name, "fmConnect", &api.connect),
        Resolve(library, name, "fmDisconnect", &api.disconnect),
        Resolve(library, name, "fmGetSupportedFabricPartitions", &api.get_supported),
        Resolve(library, name, "fmActivateFabricPartition", &api.activate),
        Resolve(library, name, "fmDeactivateFabricPartition", &api.deactivate),
        Resolve(library, name, "fmSetActivatedFabricPartitions", &api.set_activated)}) {
    if (!resolved) return resolved.error();
  }
  // Optional: the failed-NVLink list (a library without it serves partitions all the same).
  dlerror();
  api.get_nvlink_failed =
      reinterpret_cast<nvfm::GetNvlinkFailedDevicesFn>(dlsym(library, "fmGetNvlinkFailedDevices"));
  dlerror();
  return api;
}

// One call's outcome, shared by the caller and the call's thread (which may outlive the wait).
struct Pending {
  std::mutex mu;
  std::condition_variable done_cv;
  bool done = false;
  bool abandoned = false;  // the caller stopped waiting
  nvfm::Return rc = nvfm::kGenericError;
};

}  // namespace

std::string DeadlineText(std::chrono::milliseconds deadline) {
  const auto ms = deadline.count();
  return ms % 1000 == 0 ? std::to_string(ms / 1000) + "s" : std::to_string(ms) + " ms";
}

bool IsNoAnswer(const Error& error) {
  return error.category == ErrorCategory::kUnavailable &&
         error.message.find(kNoAnswer) != std::string::npos;
}

Result<std::shared_ptr<NvfmLibrary>> NvfmLibrary::Open(const std::string& name) {
  static std::mutex registry_mu;
  static auto* registry = new std::map<std::string, std::shared_ptr<NvfmLibrary>>();
  std::lock_guard lock(registry_mu);
  if (auto it = registry->find(name); it != registry->end()) return it->second;
  void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    return Unavailable("dlopen " + name + ": " + (error ? error : "failed") +
                       " (is NVIDIA Fabric Manager's client library installed?)");
  }
  auto api = ResolveAll(handle, name);
  if (!api) {
    dlclose(handle);
    return api.error();
  }
  // FM_ST_IN_USE: the library was already initialised in this process, which is fine.
  if (nvfm::Return rc = api->lib_init(); rc != nvfm::kSuccess && rc != nvfm::kInUse) {
    dlclose(handle);
    return Unavailable("fmLibInit: " + std::string(nvfm::ReturnName(rc)) + " (" +
                       std::to_string(rc) + ")");
  }
  std::shared_ptr<NvfmLibrary> library(new NvfmLibrary(name, handle, *api));
  registry->emplace(name, library);
  return library;
}

Status NvfmLibrary::Admit(const std::string& what) {
  std::lock_guard lock(mu_);
  const auto now = Clock::now();
  if (now < quiet_until_) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(quiet_until_ - now).count();
    return Unavailable(what + ": not sent: " + hung_call_ +
                       "; the fabric manager is asked again in " + std::to_string(left) + " ms");
  }
  if (stuck_ >= kMaxStuckCalls) {
    return Unavailable(what + ": not sent: " + std::to_string(stuck_) + " calls into " + name_ +
                       " are still waiting for the fabric manager (" + hung_call_ + ")");
  }
  return Ok();
}

void NvfmLibrary::Returned(bool stuck) {
  if (!stuck) return;
  std::lock_guard lock(mu_);
  --stuck_;
}

Result<nvfm::Return> NvfmLibrary::Call(const std::string& what, std::chrono::milliseconds deadline,
                                       std::function<nvfm::Return()> call,
                                       std::function<void(nvfm::Return)> late) {
  if (auto admitted = Admit(what); !admitted) return admitted.error();
  auto pending = std::make_shared<Pending>();
  // The library object lives for the process, so the thread may use `this` after the caller left.
  try {
    std::thread([this, pending, call = std::move(call), late = std::move(late)] {
      const nvfm::Return rc = call();
      bool abandoned = false;
      {
        std::lock_guard lock(pending->mu);
        pending->rc = rc;
        pending->done = true;
        abandoned = pending->abandoned;
      }
      pending->done_cv.notify_all();
      if (abandoned && late) late(rc);
      Returned(abandoned);
    }).detach();
  } catch (const std::system_error& error) {
    return Unavailable(what + ": not sent: no thread for the call (" + error.what() + ")");
  }
  std::unique_lock lock(pending->mu);
  if (pending->done_cv.wait_for(lock, deadline, [&] { return pending->done; })) return pending->rc;
  pending->abandoned = true;
  lock.unlock();
  const std::string hung = what + ": " + std::string(kNoAnswer) + " " + DeadlineText(deadline);
  {
    std::lock_guard library_lock(mu_);
    ++stuck_;
    quiet_until_ = Clock::now() + deadline;
    hung_call_ = hung;
  }
  return Unavailable(hung +
                     " (the fabric manager took the call and did not answer; the connection is "
                     "dropped)");
}

}  // namespace tessera::fabricmanager

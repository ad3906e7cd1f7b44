// libnvfm.so.1 loaded once per process and path, and every call into it under a deadline.
//
// The client library does its socket I/O inside each call and takes a time limit for nothing but
// fmConnect, so a fabric manager that accepts a request and never answers (or answers half of it)
// would hold the caller forever. Each call therefore runs on a thread of its own and is waited
// for until the deadline; a call still running then is left to finish (or hang) on its thread,
// which keeps the library loaded and owns whatever the call was given. Its connection must not be
// used again. After such a call the library is not called again for one deadline (calls meanwhile
// are refused at once, naming the call that hung), and at most kMaxStuckCalls calls may be left
// running, so a hung fabric manager costs each caller at most one deadline and a bounded number
// of threads.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "common/error.h"
#include "fabricmanager/nvfm_abi.h"

namespace tessera::fabricmanager {

struct NvfmApi {
  nvfm::LibInitFn lib_init = nullptr;
  nvfm::LibShutdownFn lib_shutdown = nullptr;
  nvfm::ConnectFn connect = nullptr;
  nvfm::DisconnectFn disconnect = nullptr;
  nvfm::GetSupportedFabricPartitionsFn get_supported = nullptr;
  nvfm::ActivateFabricPartitionFn activate = nullptr;
  nvfm::DeactivateFabricPartitionFn deactivate = nullptr;
  nvfm::SetActivatedFabricPartitionsFn set_activated = nullptr;
  // fmGetNvlinkFailedDevices; null in a library without it (the fabric's health is then not
  // asked, everything else works).
  nvfm::GetNvlinkFailedDevicesFn get_nvlink_failed = nullptr;
};

class NvfmLibrary {
 public:
  static constexpr int kMaxStuckCalls = 4;

  // The process's instance for `name`: loaded, its functions resolved and fmLibInit called once,
  // and kept for the process's life (a call left running may still be inside it, and another
  // connection may use it: fmLibShutdown would pull it from under both).
  static Result<std::shared_ptr<NvfmLibrary>> Open(const std::string& name);
  NvfmLibrary(const NvfmLibrary&) = delete;
  NvfmLibrary& operator=(const NvfmLibrary&) = delete;

  const NvfmApi& api() const { return api_; }
  const std::string& name() const { return name_; }

  // Runs `call` and answers its return code, or an Unavailable error naming `what` when it did
  // not return within `deadline` (or was refused at once, see above). `late` runs on the call's
  // thread with the code of a call that returned after its deadline (to undo what it did: close
  // a connection nobody took). `call` and `late` own everything they use.
  Result<nvfm::Return> Call(const std::string& what, std::chrono::milliseconds deadline,
                            std::function<nvfm::Return()> call,
                            std::function<void(nvfm::Return)> late = {});

 private:
  NvfmLibrary(std::string name, void* handle, NvfmApi api)
      : name_(std::move(name)), handle_(handle), api_(api) {}
  Status Admit(const std::string& what);
  void Returned(bool stuck);

  std::string name_;
  void* handle_;
  NvfmApi api_;
  std::mutex mu_;  // guards what follows
  int stuck_ = 0;  // calls past their deadline that have not returned
  std::chrono::steady_clock::time_point quiet_until_{};
  std::string hung_call_;  // the last call that did not answer, and its deadline
};

// "00000000:18:00.0" (the fabric manager's form, any case) -> "0000:18:00.0"; empty for the zeroed
// bus ID H100 and later report. Reads at most `size` bytes (the field need not end in a NUL).
std::string CanonicalPciAddress(const char* raw, size_t size);

// The failed-NVLink list as the library filled it, checked and bounded: counts past the API's
// limits are an Internal error; bus IDs that are no PCI address become empty, UUIDs keep their
// printable bytes (at most 80), ports are sorted, each once.
Result<NvlinkFailedDevices> DecodeNvlinkFailedDevices(const nvfm::NvlinkFailedDevices& raw);

// "1s", "250 ms": a deadline as messages show it.
std::string DeadlineText(std::chrono::milliseconds deadline);

}  // namespace tessera::fabricmanager

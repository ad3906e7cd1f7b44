// Shared GPUs on this host: the MPS daemon of each GPU that holds MPS shares (mps::Daemon), the
// time-slice policy of time-sliced ones, a keeper thread that checks every daemon and handles a
// failed one, and the watchdog that holds every share to its memory.
//
// - A share container starts only once its GPU's daemon is ready under a config that covers it
//   (Prepare, on the scheduler's pool): the daemon's limits are the largest share its GPU has
//   held since the daemon started, so a config only grows while shares come and go, and a
//   change drops the ready marker before the new limits go in.
// - A daemon that dies or stops answering (or whose server reports a fatal fault) marks its GPU
//   faulted: no new share is placed there, its containers are stopped with reason
//   `gpu-shared-fault: …` (their tenants read it on the container), the daemon is restarted with
//   its limits, and only then is the GPU given out again.
// - The watchdog sums the driver's per-process memory per container (SharingOptions::measure,
//   the telemetry collector's attribution); a container above its share for longer than the
//   grace is stopped with reason `gpu-memory-limit: 23.1 GiB used of 20 GiB`, after MPS's
//   terminate_client for each of its processes.
// - When a GPU's last share is gone (Release, on the checker before the GPU's check) its daemon
//   is torn down: quit, compute mode DEFAULT, unmount, remove; a time-slice goes back to 0.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "mps/mps.h"
#include "serve/model.h"
#include "sharing/sharing.h"

namespace tessera::nvml {
class Library;
}

namespace tessera::serve {

// What a share container's start needs of its GPU, taken under the model's lock.
struct ShareStart {
  std::string container_id;
  std::string pci_address;
  std::string uuid;
  sharing::Share share;
  // MPS: the largest memory and compute among the GPU's shares now.
  mps::DaemonConfig config;
};

class SharedGpus {
 public:
  SharedGpus(Model& model, const SharingOptions& options);
  ~SharedGpus();
  SharedGpus(const SharedGpus&) = delete;
  SharedGpus& operator=(const SharedGpus&) = delete;

  // mu held: what the start of `container` (placed on a share of its GPU) needs.
  Result<ShareStart> StartOfLocked(const fleet::ContainerRecord& container) const;
  // mu NOT held (the scheduler's pool): its GPU ready for it. MPS: the daemon opened (or taken
  // over), given a config covering the share, and its marker holding that config's hash; the
  // container's environment and binds. Time-slicing: the time-slice policy, and nothing to add.
  Result<sharing::ClientEdits> Prepare(const ShareStart& start);
  // mu NOT held (the checker): the GPU holds no share any more.
  Status Release(const fleet::GpuRecord& gpu);

  // The keeper thread: daemon checks and the watchdog, every SharingOptions::interval. First
  // the daemons a restart of the service left are taken over (GPUs that hold MPS shares; their
  // clients keep their server) or torn down (GPUs that hold none).
  void Start();
  void Stop();

  // MPS daemons now, by PCI address: their config hash (empty while none is ready).
  std::map<std::string, std::string> ReadyHashes() const;

 private:
  struct Gpu {
    std::mutex mutex;  // one Prepare, Release, check or restart of this GPU at a time
    std::unique_ptr<mps::Daemon> daemon;
    bool timesliced = false;
  };
  Gpu& GpuOf(const std::string& pci);
  void Adopt();
  Result<const nvml::Library*> Nvml();
  Status SetTimeslice(const std::string& uuid, int value);
  void Loop();
  void CheckDaemons();
  void Fault(const std::string& pci, Gpu& gpu, const std::string& reason);
  void Watch();

  Model& model_;
  const SharingOptions& options_;
  sharing::Watchdog watchdog_;

  mutable std::mutex mutex_;                          // guards gpus_, nvml_ and stop_
  std::map<std::string, std::unique_ptr<Gpu>> gpus_;  // by PCI address; never erased
  std::unique_ptr<nvml::Library> nvml_;
  bool stop_ = false;
  std::condition_variable wake_;
  std::thread thread_;
};

}  // namespace tessera::serve

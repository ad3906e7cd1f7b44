// Shared GPUs on this host: the MPS daemon of each GPU that holds MPS shares (mps::Daemon), the
// time-slice policy of time-sliced ones, one keeper thread per GPU that checks its daemon and
// handles a failure (so one GPU's hung daemon never delays another GPU's checks, the checker,
// the start or the stop of the service by more than its own command time-out), and the
// watchdog's thread that holds every share to its memory at jittered times.
//
// - A share container starts only once its GPU's daemon is ready under a config that covers it
//   (Prepare, on the scheduler's pool): the daemon's limits are the largest share its GPU has
//   held since the daemon started, so a config only grows while shares come and go, and a
//   change drops the ready marker before the new limits go in.
// - A daemon that dies or stops answering (or whose server reports a fatal fault) marks its GPU
//   faulted: no new share is placed there, its containers are stopped with reason
//   `gpu-shared-fault: …` (their tenants read it on the container), the daemon is restarted with
//   its limits, and only then is the GPU given out again.
// - The watchdog sums the driver's per-process memory per container (SharingOptions::measure, a
//   fresh reading at each of its own jittered samples); a container over its share in two
//   samples within the grace is stopped with reason `gpu-memory-limit: 23.1 GiB used of 20 GiB`,
//   after MPS's terminate_client for each of its processes.
// - When a GPU's last share is gone (Release, on the checker before the GPU's check) its daemon
//   is torn down: quit, compute mode DEFAULT, unmount, remove; a time-slice goes back to 0.
// - A share of a MIG slice has the slice's own daemon (one per MIG device, named by its MIG
//   UUID, the GPU's compute mode left alone), checked by a keeper of its own; a fault there stops
//   only that slice's shares. When a slice's last share is gone, the watchdog's thread tears its
//   daemon down and frees the slice (MigSlice::shared), so the next holder never meets it.
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
  // A share of a MIG slice: the slice's MIG device (its daemon's UUID); else empty.
  std::string mig_device;
  sharing::Share share;
  // MPS: the largest memory and compute among the GPU's shares now.
  mps::DaemonConfig config;
};

// mu held: the share clients on `gpu` (only those on `mig_device` when it is not empty: one MPS
// server, one fault domain) are stopped, saying `reason`.
void StopShareClientsLocked(Model& model, const fleet::GpuRecord& gpu,
                            const std::string& mig_device, const std::string& reason);

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

  // The keeper threads (daemon checks, every SharingOptions::interval) and the watchdog's. Each
  // GPU's keeper first takes over the daemon a restart of the service left (a GPU that holds MPS
  // shares: its clients keep their server) or tears it down (one that holds none), on its own
  // thread: Start never waits for a daemon.
  void Start();
  void Stop();
  // Limits that someone other than the service moved, and that were put back, since the start.
  uint64_t limits_restored() const;

  // MPS daemons now, by PCI address (a MIG device's by its MIG UUID): their config hash (empty
  // while none is ready).
  std::map<std::string, std::string> ReadyHashes() const;

 private:
  // What a restart of the service left on a GPU, for its keeper to settle first.
  struct Leftover {
    std::string pci;                      // the GPU's (a MIG device's parent's)
    std::optional<ShareStart> take_over;  // a daemon for the MPS shares the GPU still holds
    std::string remove_uuid;              // else a daemon nobody needs: torn down
  };
  // One daemon's GPU: a whole GPU (keyed by its PCI address) or a MIG device (by its UUID).
  struct Gpu {
    std::string pci;   // the GPU's PCI address (the MIG device's parent's)
    std::mutex mutex;  // one Prepare, Release, check or restart of this GPU at a time
    std::unique_ptr<mps::Daemon> daemon;
    bool timesliced = false;
    Leftover leftover;      // set before its keeper starts, read by it alone
    std::thread keeper;     // joined by Stop
    uint64_t restored = 0;  // limits restored by its daemons that are gone
  };
  // By key: the PCI address, or a MIG device's UUID (then `pci` names its parent).
  Gpu& GpuOf(const std::string& key, const std::string& pci);
  Gpu& GpuOfLocked(const std::string& key, const std::string& pci);  // mutex_ held
  void StartKeeperLocked(const std::string& key, Gpu& gpu);          // mutex_ held
  void LeftoversOfMig(const fleet::GpuRecord& gpu, const std::vector<std::string>& existing,
                      std::map<std::string, Leftover>& out) const;  // model_.mu held
  Status ReleaseMig(const fleet::GpuRecord& gpu);
  void FaultSlice(const std::string& mig_device, Gpu& gpu, const std::string& reason);
  // Tears down the daemons of slices whose last share is gone, and frees those slices.
  void SettleMigSlices();
  std::map<std::string, Leftover> Leftovers();
  Result<const nvml::Library*> Nvml();
  Status SetTimeslice(const std::string& uuid, int value);
  void Keep(std::string pci, Gpu& gpu);
  void Settle(const std::string& pci, Gpu& gpu);
  void CheckDaemon(const std::string& pci, Gpu& gpu);
  void Fault(const std::string& pci, Gpu& gpu, const std::string& reason);
  void WatchLoop();
  void Watch();

  Model& model_;
  const SharingOptions& options_;
  sharing::Watchdog watchdog_;

  mutable std::mutex mutex_;                          // guards gpus_, nvml_, running_ and stop_
  std::map<std::string, std::unique_ptr<Gpu>> gpus_;  // by key (see GpuOf); never erased
  std::unique_ptr<nvml::Library> nvml_;
  bool running_ = false;  // keepers are started for new GPUs
  bool stop_ = false;
  std::condition_variable wake_;
  std::thread watchdog_thread_;
};

}  // namespace tessera::serve

// Tells when the inventory under a host root may have changed: a driver upgrade (new
// ld.so.cache, new driver version), device nodes created or removed, PCI hot-plug or a device
// rebound to another driver (e.g. vfio-pci).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "common/error.h"

namespace tessera::inventory {

class ChangeWatcher {
 public:
  // Watches with inotify what inotify can see (<root>/etc for ld.so.cache, <root>/dev and its
  // vfio/dri subdirectories, <root>/sys/bus/pci/devices, firmware and IPC socket dirs) and polls
  // every `poll_interval_ms` what it cannot: /proc/driver/nvidia/version (procfs has no
  // inotify), /sys/module/nvidia/version, the PCI device list and each device's bound driver
  // (sysfs raises no inotify events for kernel-made changes).
  static Result<std::unique_ptr<ChangeWatcher>> Start(const std::string& root,
                                                      int poll_interval_ms = 2000);
  ~ChangeWatcher();
  ChangeWatcher(const ChangeWatcher&) = delete;
  ChangeWatcher& operator=(const ChangeWatcher&) = delete;

  // Blocks until a change is seen (true), `stop_fd` becomes readable or `timeout_ms` passes
  // (false; -1 waits forever). Events arriving within 100 ms of the first are folded in, so a
  // driver upgrade that touches many files reads as one change.
  Result<bool> Wait(int timeout_ms = -1, int stop_fd = -1);

  struct WatchedDir;  // a directory under the root and the entry names that matter in it

 private:
  ChangeWatcher(std::string root, int poll_interval_ms, int inotify_fd);
  std::string Fingerprint() const;
  bool DrainEvents();  // true when a relevant event was read

  std::string root_;
  int poll_interval_ms_;
  int inotify_fd_;
  std::map<int, const WatchedDir*> watches_;  // inotify watch descriptor -> directory
  std::string fingerprint_;
};

}  // namespace tessera::inventory

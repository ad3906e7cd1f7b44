// The device plugin's MPS daemons (sharing.mps): one per GPU of an MPS resource, limits = the
// GPU's memory and threads over its replicas. A thread per GPU opens its daemon (taking over one
// of an earlier run, whose clients keep going), checks it, restarts a dead or hung one, and
// tells the resource manager each GPU's config hash, ready marker and fault, which is what
// gates ListAndWatch health and Allocate. Daemons of GPUs no longer shared through MPS are torn
// down at start. Stopping the keeper leaves the daemons running: a plugin restart or SIGHUP must
// not take the server away from running Pods.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "deviceplugin/deviceplugin.h"

namespace tessera::deviceplugin {

class MpsKeeper {
 public:
  // Null when no resource is shared through MPS.
  static std::unique_ptr<MpsKeeper> Start(std::shared_ptr<ResourceManager> manager);
  ~MpsKeeper();
  MpsKeeper(const MpsKeeper&) = delete;
  MpsKeeper& operator=(const MpsKeeper&) = delete;

 private:
  explicit MpsKeeper(std::shared_ptr<ResourceManager> manager);
  void Run();

  std::shared_ptr<ResourceManager> manager_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;  // guarded by mutex_
  std::thread thread_;
};

}  // namespace tessera::deviceplugin

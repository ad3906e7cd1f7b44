// The scheduler (leader only): one thread that applies exits, places pending containers
// (serially, so decisions see one another), hands starts and stops to a bounded pool, and sweeps
// finished records by the retention policy. Only the replica that leads runs it: it is the one
// writer of placements and leases.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backends/backend.h"
#include "serve/model.h"

namespace boost::asio {
class thread_pool;
}

namespace tessera::serve {

class Scheduler {
 public:
  Scheduler(Model& model, backends::ContainerBackend& backend);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  void Start();
  // Joins the thread, then the pool after the starts and stops already handed to it returned.
  void Stop();

 private:
  void Loop();
  bool TryPlace(fleet::ContainerRecord& container, std::vector<fleet::Mutation>& out);
  bool TryPlaceOnNodes(fleet::ContainerRecord& container, std::vector<fleet::Mutation>& out);
  topology::GpuMask FreeMaskLocked(size_t node) const;  // topology order of model_.nodes[node]
  // mu held: hand a placed container's start, or a stop, to the pool; the start's outcome is
  // applied under mu when it returns.
  void StartOnPoolLocked(const std::string& id, std::vector<fleet::Mutation>& out);
  void StopOnPoolLocked(const std::string& id);
  void ApplyStartLocked(const std::string& id, const Status& status);
  // Removes the finished records the retention policy no longer keeps, from memory and the
  // store, compacting the listing order; their backend leftovers are removed on the pool.
  void SweepRetentionLocked();

  Model& model_;
  backends::ContainerBackend& backend_;
  bool stopping_ = false;                               // guarded by model_.mu
  std::chrono::steady_clock::time_point next_sweep_{};  // scheduler thread only
  std::thread thread_;
  // Backend starts, stops and removals; created in Start(), joined in Stop().
  std::unique_ptr<boost::asio::thread_pool> pool_;
};

}  // namespace tessera::serve

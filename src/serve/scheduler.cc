// The scheduler thread: exits, placement (serial, so decisions see one another), starts and
// stops handed to the pool, and the retention sweep of finished records.
#include <spdlog/spdlog.h>

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>

#include "serve/service.h"

namespace tessera::serve {

using fleet::ContainerRecord;
using fleet::ContainerState;
using fleet::LeaseState;
using fleet::Mutation;

void Service::SchedulerLoop() {
  std::unique_lock lock(mu_);
  // A zero interval would spin.
  const auto sweep_interval =
      std::max(options_.retention.sweep_interval, std::chrono::milliseconds(10));
  next_sweep_ = std::chrono::steady_clock::now();
  while (!stopping_) {
    scheduler_wake_.wait_until(lock, next_sweep_, [this] {
      return stopping_ || !exits_.empty() || !to_stop_.empty() ||
             (reschedule_ && !pending_.empty()) || std::chrono::steady_clock::now() >= next_sweep_;
    });
    if (stopping_) break;
    if (const auto now = std::chrono::steady_clock::now(); now >= next_sweep_) {
      SweepRetentionLocked();
      next_sweep_ = now + sweep_interval;
    }
    std::vector<Mutation> mutations;
    while (!exits_.empty()) {
      ExitEvent event = std::move(exits_.front());
      exits_.pop_front();
      // The backend may report an exit before its Start returned (a container that ends at
      // once): applied after the start, so the container and its GPUs pass through running.
      if (starting_.count(event.id)) {
        early_exits_[event.id] = std::move(event.info);
        continue;
      }
      auto it = containers_.find(event.id);
      if (it != containers_.end()) FinishContainer(it->second, event.info, mutations);
    }
    if (!mutations.empty()) {
      reschedule_ = true;
      CommitLocked(std::move(mutations), nullptr);
      mutations.clear();
    }
    while (!to_stop_.empty()) {
      StopOnPoolLocked(to_stop_.front());
      to_stop_.pop_front();
    }
    if (!reschedule_) continue;
    reschedule_ = false;
    // FIFO, but a GPU request that does not fit holds back later GPU requests (no starvation of
    // large ones); containers without GPUs never wait for GPUs.
    std::vector<std::string> to_start;
    bool gpu_blocked = false;
    for (auto it = pending_.begin(); it != pending_.end();) {
      auto found = containers_.find(*it);
      if (found == containers_.end() || found->second.state != ContainerState::kPending ||
          found->second.started) {
        it = pending_.erase(it);
        continue;
      }
      auto& container = found->second;
      if (container.spec.gpus > 0 && gpu_blocked) {
        ++it;
        continue;
      }
      if (!TryPlace(container, mutations)) {
        gpu_blocked = true;
        ++it;
        continue;
      }
      container.started = true;
      mutations.push_back(container);
      to_start.push_back(container.id);
      it = pending_.erase(it);
    }
    if (!mutations.empty()) CommitLocked(std::move(mutations), nullptr);
    mutations.clear();
    for (const auto& id : to_start)
      StartOnPoolLocked(id, mutations);
    if (!mutations.empty()) CommitLocked(std::move(mutations), nullptr);
    idle_.notify_all();
  }
}

void Service::StartOnPoolLocked(const std::string& id, std::vector<Mutation>& out) {
  auto it = containers_.find(id);
  if (it == containers_.end()) return;
  const auto& container = it->second;
  backends::StartRequest request;
  request.id = container.id;
  request.tenancy = container.spec.tenancy;
  request.image = container.spec.image;
  request.command = container.spec.command;
  request.env = container.spec.env;
  request.isolation = container.spec.isolation;
  request.network = container.spec.network;
  // Checked again at start: the entitlement may have been withdrawn since the submission.
  auto tenancy_it = tenancies_.find(container.spec.tenancy);
  auto volumes =
      tenancy::ResolveVolumes(container.spec.tenancy,
                              tenancy_it == tenancies_.end() ? tenancy::StorageEntitlements{}
                                                             : StorageOf(tenancy_it->second),
                              container.spec.volumes);
  if (!volumes) {
    FinishContainer(it->second, backends::ExitInfo{std::nullopt, true, volumes.error().message},
                    out);
    return;
  }
  request.volumes = std::move(*volumes);
  for (const auto& gpu_id : container.gpus) {
    if (auto* gpu = FindGpu(gpu_id)) {
      request.gpu_pci_addresses.push_back(gpu->pci_address);
      request.cdi_devices.push_back(gpu->cdi_device);
      request.node = gpu->node;
    }
  }
  busy_++;
  starting_.insert(id);
  boost::asio::post(*pool_, [this, request = std::move(request)] {
    auto status = backend_->Start(
        request,
        [this](const std::string& cid, const backends::ExitInfo& info) { OnExit(cid, info); });
    std::lock_guard lock(mu_);
    busy_--;
    starting_.erase(request.id);
    ApplyStartLocked(request.id, status);
  });
}

void Service::ApplyStartLocked(const std::string& id, const Status& status) {
  std::vector<Mutation> mutations;
  auto it = containers_.find(id);
  if (it != containers_.end()) {
    auto& started = it->second;
    if (!status) {
      FinishContainer(started, backends::ExitInfo{std::nullopt, true, status.error().message},
                      mutations);
    } else {
      if (started.state == ContainerState::kPending) {
        SetContainerState(started, ContainerState::kRunning);
        started.started_ms = fleet::NowMs();
        for (const auto& pci : started.gpus)
          if (auto* gpu = FindGpu(pci); gpu && gpu->state == LeaseState::kReserved)
            SetGpuState(*gpu, LeaseState::kActive, "", mutations);
        mutations.push_back(started);
      }
      if (auto early = early_exits_.find(id); early != early_exits_.end()) {
        FinishContainer(started, early->second, mutations);
      } else if (started.stop_requested && started.state == ContainerState::kRunning) {
        to_stop_.push_back(started.id);
        scheduler_wake_.notify_one();
      }
    }
  }
  early_exits_.erase(id);
  if (!mutations.empty()) {
    reschedule_ = true;
    CommitLocked(std::move(mutations), nullptr);
    scheduler_wake_.notify_one();
  }
  idle_.notify_all();
}

void Service::StopOnPoolLocked(const std::string& id) {
  busy_++;
  boost::asio::post(*pool_, [this, id] {
    auto status = backend_->Stop(id, options_.stop_grace);
    if (!status) spdlog::warn("stop {}: {}", id, status.error().message);
    std::lock_guard lock(mu_);
    busy_--;
    idle_.notify_all();
  });
}

void Service::SweepRetentionLocked() {
  std::vector<const ContainerRecord*> ordered;
  ordered.reserve(container_order_.size());
  for (const auto& id : container_order_)
    ordered.push_back(&containers_.at(id));
  // A record whose GPUs are still being released or checked stays: the check follows its ID.
  auto pinned = [this](const ContainerRecord& container) {
    for (const auto& gpu_id : container.gpus)
      if (auto* gpu = FindGpu(gpu_id); gpu && gpu->leased() && gpu->container_id == container.id)
        return true;
    return false;
  };
  const auto drop = PlanRetention(ordered, options_.retention, fleet::NowMs(), pinned);
  if (drop.empty()) return;
  std::vector<Mutation> mutations;
  std::vector<std::string> in_backend;
  for (size_t position : drop) {
    const std::string& id = container_order_[position];
    auto it = containers_.find(id);
    const ContainerRecord& container = it->second;
    if (!container.idempotency_key.empty()) {
      auto key = idempotency_.find(container.tenancy_uid + '\n' + container.idempotency_key);
      if (key != idempotency_.end() && key->second == id) idempotency_.erase(key);
    }
    container_counts_[static_cast<int>(container.state)]--;
    if (container.started) in_backend.push_back(id);
    mutations.push_back(fleet::ContainerDeletion{id});
    container_position_.erase(id);
    containers_.erase(it);
  }
  // Compact the listing order from the first removed position on; the positions of the records
  // before it do not change.
  size_t kept = drop.front();
  for (size_t i = drop.front(); i < container_order_.size(); ++i) {
    if (!containers_.count(container_order_[i])) continue;
    if (kept != i) container_order_[kept] = std::move(container_order_[i]);
    container_position_[container_order_[kept]] = kept;
    ++kept;
  }
  container_order_.resize(kept);
  spdlog::info("retention: removed {} finished container records", drop.size());
  CommitLocked(std::move(mutations), nullptr);
  if (in_backend.empty()) return;
  // What the runtime kept of them (podman keeps ended containers for their logs).
  busy_++;
  boost::asio::post(*pool_, [this, ids = std::move(in_backend)] {
    for (const auto& id : ids) {
      auto removed = backend_->Remove(id);
      if (!removed && removed.error().category != ErrorCategory::kNotFound)
        spdlog::warn("retention: remove {}: {}", id, removed.error().message);
    }
    std::lock_guard lock(mu_);
    busy_--;
    idle_.notify_all();
  });
}

}  // namespace tessera::serve

// The scheduler thread: exits, placement (serial, so decisions see one another), starts and
// stops handed to the pool, and the retention sweep of finished records.
#include "serve/scheduler.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>

namespace tessera::serve {

using fleet::ContainerRecord;
using fleet::ContainerState;
using fleet::GpuRecord;
using fleet::LeaseState;
using fleet::Mutation;

Scheduler::Scheduler(Model& model, backends::ContainerBackend& backend)
    : model_(model), backend_(backend) {}

Scheduler::~Scheduler() {
  Stop();
}

void Scheduler::Start() {
  std::lock_guard lock(model_.mu);
  if (thread_.joinable()) return;
  stopping_ = false;
  pool_ = std::make_unique<boost::asio::thread_pool>(std::max(1, model_.options.start_workers));
  thread_ = std::thread([this] { Loop(); });
}

void Scheduler::Stop() {
  {
    std::lock_guard lock(model_.mu);
    stopping_ = true;
  }
  model_.scheduler_wake.notify_all();
  if (thread_.joinable()) thread_.join();
  // Only the scheduler posts work, so none comes after this. A start handed over is marked
  // started in the store: it runs to its end rather than leave a container the next start of
  // the service would take for vanished. Work applies its outcome under mu: joined without it.
  if (pool_) {
    pool_->join();
    pool_.reset();
  }
}

void Scheduler::Loop() {
  std::unique_lock lock(model_.mu);
  // A zero interval would spin.
  const auto sweep_interval =
      std::max(model_.options.retention.sweep_interval, std::chrono::milliseconds(10));
  next_sweep_ = std::chrono::steady_clock::now();
  while (!stopping_) {
    model_.scheduler_wake.wait_until(lock, next_sweep_, [this] {
      return stopping_ || !model_.exits.empty() || !model_.to_stop.empty() ||
             (model_.reschedule && !model_.pending.empty()) ||
             std::chrono::steady_clock::now() >= next_sweep_;
    });
    if (stopping_) break;
    if (const auto now = std::chrono::steady_clock::now(); now >= next_sweep_) {
      SweepRetentionLocked();
      next_sweep_ = now + sweep_interval;
    }
    std::vector<Mutation> mutations;
    while (!model_.exits.empty()) {
      Model::ExitEvent event = std::move(model_.exits.front());
      model_.exits.pop_front();
      // The backend may report an exit before its Start returned (a container that ends at
      // once): applied after the start, so the container and its GPUs pass through running.
      if (model_.starting.count(event.id)) {
        model_.early_exits[event.id] = std::move(event.info);
        continue;
      }
      auto it = model_.containers.find(event.id);
      if (it != model_.containers.end()) model_.FinishContainer(it->second, event.info, mutations);
    }
    if (!mutations.empty()) {
      model_.reschedule = true;
      model_.Commit(std::move(mutations), nullptr);
      mutations.clear();
    }
    while (!model_.to_stop.empty()) {
      StopOnPoolLocked(model_.to_stop.front());
      model_.to_stop.pop_front();
    }
    if (!model_.reschedule) continue;
    model_.reschedule = false;
    // FIFO, but a GPU request that does not fit holds back later GPU requests (no starvation of
    // large ones); containers without GPUs never wait for GPUs.
    std::vector<std::string> to_start;
    bool gpu_blocked = false;
    for (auto it = model_.pending.begin(); it != model_.pending.end();) {
      auto found = model_.containers.find(*it);
      if (found == model_.containers.end() || found->second.state != ContainerState::kPending ||
          found->second.started) {
        it = model_.pending.erase(it);
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
      it = model_.pending.erase(it);
    }
    if (!mutations.empty()) model_.Commit(std::move(mutations), nullptr);
    mutations.clear();
    for (const auto& id : to_start)
      StartOnPoolLocked(id, mutations);
    if (!mutations.empty()) model_.Commit(std::move(mutations), nullptr);
    model_.idle.notify_all();
  }
}

bool Scheduler::TryPlace(ContainerRecord& container, std::vector<Mutation>& out) {
  int want = container.spec.gpus;
  if (want == 0) return true;
  if (model_.options.fleet) return TryPlaceOnNodes(container, out);
  if (!model_.chooser) return false;
  topology::GpuMask available = 0;
  for (size_t i = 0; i < model_.gpus.size(); ++i)
    if (model_.gpus[i].state == LeaseState::kFree) available |= topology::GpuMask{1} << i;
  if (topology::MaskSize(available) < want) return false;
  auto mask = model_.chooser->ChooseMask(available, want);
  if (!mask) return false;
  container.gpus.clear();
  for (int index : topology::MaskToIndices(*mask)) {
    auto& gpu = model_.gpus[index];
    gpu.tenancy = container.spec.tenancy;
    gpu.container_id = container.id;
    model_.SetGpuState(gpu, LeaseState::kReserved, "", out);
    container.gpus.push_back(gpu.id());
  }
  return true;
}

topology::GpuMask Scheduler::FreeMaskLocked(size_t node) const {
  topology::GpuMask free = 0;
  const auto& indices = model_.nodes[node].gpus;
  for (size_t i = 0; i < indices.size(); ++i) {
    const GpuRecord& gpu = model_.gpus[indices[i]];
    if (gpu.state == LeaseState::kFree && gpu.available) free |= topology::GpuMask{1} << i;
  }
  return free;
}

// The node by the placement policy (over every node's free GPUs, as the fleet model sees them:
// module masks on partitioned nodes), then the GPUs on it by the node's topology chooser.
bool Scheduler::TryPlaceOnNodes(ContainerRecord& container, std::vector<Mutation>& out) {
  const int want = container.spec.gpus;
  if (!model_.placement) return false;
  std::vector<topology::GpuMask> free(model_.placement_nodes.size());
  for (size_t f = 0; f < model_.placement_nodes.size(); ++f) {
    const Model::Node& node = model_.nodes[model_.placement_nodes[f]];
    free[f] = FreeMaskLocked(model_.placement_nodes[f]);
    topology::GpuMask model = free[f];
    if (node.planner) {
      model = 0;
      for (size_t i = 0; i < node.module_of.size(); ++i)
        if ((free[f] >> i) & 1) model |= topology::GpuMask{1} << (node.module_of[i] - 1);
    }
    if (auto status = model_.placement->SetFreeMask(static_cast<int>(f), model); !status)
      spdlog::error("placement: node {}: {}", node.name, status.error().message);
  }
  const int chosen = model_.placement->ChooseNode(want, model_.options.policy);
  if (chosen < 0) return false;
  const Model::Node& node = model_.nodes[model_.placement_nodes[chosen]];
  auto mask = node.chooser->ChooseMask(free[chosen], want);
  if (!mask) {
    spdlog::warn("placement: node {} chosen for {} GPUs but its chooser says: {}", node.name, want,
                 mask.error().message);
    return false;
  }
  container.gpus.clear();
  for (int index : topology::MaskToIndices(*mask)) {
    auto& gpu = model_.gpus[node.gpus[index]];
    gpu.tenancy = container.spec.tenancy;
    gpu.container_id = container.id;
    model_.SetGpuState(gpu, LeaseState::kReserved, "", out);
    container.gpus.push_back(gpu.id());
  }
  return true;
}

void Scheduler::StartOnPoolLocked(const std::string& id, std::vector<Mutation>& out) {
  auto it = model_.containers.find(id);
  if (it == model_.containers.end()) return;
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
  auto tenancy_it = model_.tenancies.find(container.spec.tenancy);
  auto volumes = tenancy::ResolveVolumes(container.spec.tenancy,
                                         tenancy_it == model_.tenancies.end()
                                             ? tenancy::StorageEntitlements{}
                                             : Model::StorageOf(tenancy_it->second),
                                         container.spec.volumes);
  if (!volumes) {
    model_.FinishContainer(it->second,
                           backends::ExitInfo{std::nullopt, true, volumes.error().message}, out);
    return;
  }
  request.volumes = std::move(*volumes);
  for (const auto& gpu_id : container.gpus) {
    if (auto* gpu = model_.FindGpu(gpu_id)) {
      request.gpu_pci_addresses.push_back(gpu->pci_address);
      request.cdi_devices.push_back(gpu->cdi_device);
      request.node = gpu->node;
    }
  }
  model_.busy++;
  model_.starting.insert(id);
  boost::asio::post(*pool_, [this, request = std::move(request)] {
    auto status =
        backend_.Start(request, [this](const std::string& cid, const backends::ExitInfo& info) {
          model_.OnExit(cid, info);
        });
    std::lock_guard lock(model_.mu);
    model_.busy--;
    model_.starting.erase(request.id);
    ApplyStartLocked(request.id, status);
  });
}

void Scheduler::ApplyStartLocked(const std::string& id, const Status& status) {
  std::vector<Mutation> mutations;
  auto it = model_.containers.find(id);
  if (it != model_.containers.end()) {
    auto& started = it->second;
    if (!status) {
      model_.FinishContainer(
          started, backends::ExitInfo{std::nullopt, true, status.error().message}, mutations);
    } else {
      if (started.state == ContainerState::kPending) {
        model_.SetContainerState(started, ContainerState::kRunning);
        started.started_ms = fleet::NowMs();
        for (const auto& pci : started.gpus)
          if (auto* gpu = model_.FindGpu(pci); gpu && gpu->state == LeaseState::kReserved)
            model_.SetGpuState(*gpu, LeaseState::kActive, "", mutations);
        mutations.push_back(started);
      }
      if (auto early = model_.early_exits.find(id); early != model_.early_exits.end()) {
        model_.FinishContainer(started, early->second, mutations);
      } else if (started.stop_requested && started.state == ContainerState::kRunning) {
        model_.to_stop.push_back(started.id);
        model_.scheduler_wake.notify_one();
      }
    }
  }
  model_.early_exits.erase(id);
  if (!mutations.empty()) {
    model_.reschedule = true;
    model_.Commit(std::move(mutations), nullptr);
    model_.scheduler_wake.notify_one();
  }
  model_.idle.notify_all();
}

void Scheduler::StopOnPoolLocked(const std::string& id) {
  model_.busy++;
  boost::asio::post(*pool_, [this, id] {
    auto status = backend_.Stop(id, model_.options.stop_grace);
    if (!status) spdlog::warn("stop {}: {}", id, status.error().message);
    std::lock_guard lock(model_.mu);
    model_.busy--;
    model_.idle.notify_all();
  });
}

void Scheduler::SweepRetentionLocked() {
  std::vector<const ContainerRecord*> ordered;
  ordered.reserve(model_.container_order.size());
  for (const auto& id : model_.container_order)
    ordered.push_back(&model_.containers.at(id));
  // A record whose GPUs are still being released or checked stays: the check follows its ID.
  auto pinned = [this](const ContainerRecord& container) {
    for (const auto& gpu_id : container.gpus)
      if (auto* gpu = model_.FindGpu(gpu_id);
          gpu && gpu->leased() && gpu->container_id == container.id)
        return true;
    return false;
  };
  const auto drop = PlanRetention(ordered, model_.options.retention, fleet::NowMs(), pinned);
  if (drop.empty()) return;
  std::vector<Mutation> mutations;
  std::vector<std::string> in_backend;
  for (size_t position : drop) {
    const std::string& id = model_.container_order[position];
    auto it = model_.containers.find(id);
    const ContainerRecord& container = it->second;
    if (!container.idempotency_key.empty()) {
      auto key = model_.idempotency.find(container.tenancy_uid + '\n' + container.idempotency_key);
      if (key != model_.idempotency.end() && key->second == id) model_.idempotency.erase(key);
    }
    model_.container_counts[static_cast<int>(container.state)]--;
    if (container.started) in_backend.push_back(id);
    mutations.push_back(fleet::ContainerDeletion{id});
    model_.container_position.erase(id);
    model_.containers.erase(it);
  }
  // Compact the listing order from the first removed position on; the positions of the records
  // before it do not change.
  size_t kept = drop.front();
  for (size_t i = drop.front(); i < model_.container_order.size(); ++i) {
    if (!model_.containers.count(model_.container_order[i])) continue;
    if (kept != i) model_.container_order[kept] = std::move(model_.container_order[i]);
    model_.container_position[model_.container_order[kept]] = kept;
    ++kept;
  }
  model_.container_order.resize(kept);
  spdlog::info("retention: removed {} finished container records", drop.size());
  model_.Commit(std::move(mutations), nullptr);
  if (in_backend.empty()) return;
  // What the runtime kept of them (podman keeps ended containers for their logs).
  model_.busy++;
  boost::asio::post(*pool_, [this, ids = std::move(in_backend)] {
    for (const auto& id : ids) {
      auto removed = backend_.Remove(id);
      if (!removed && removed.error().category != ErrorCategory::kNotFound)
        spdlog::warn("retention: remove {}: {}", id, removed.error().message);
    }
    std::lock_guard lock(model_.mu);
    model_.busy--;
    model_.idle.notify_all();
  });
}

}  // namespace tessera::serve

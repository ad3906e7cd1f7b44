// The scheduler thread: exits, placement (serial, so decisions see one another), starts and
// stops handed to the pool, and the retention sweep of finished records.
#include "serve/scheduler.h"

#include <pthread.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <cmath>
#include <cstdio>

#include "serve/port_publishing.h"
#include "serve/queue.h"
#include "serve/record_names.h"

namespace tessera::serve {

Scheduler::Scheduler(Model& model, backends::ContainerBackend& backend, SharedGpus& shared)
    : model_(model), backend_(backend), shared_(shared) {}

Scheduler::~Scheduler() {
  Stop();
}

void Scheduler::SetPlacementGuard(std::function<bool()> may_place) {
  std::lock_guard lock(model_.mu);
  may_place_ = std::move(may_place);
}

void Scheduler::Start() {
  std::lock_guard lock(model_.mu);
  if (thread_.joinable()) return;
  stopping_ = false;
  pool_ = std::make_unique<boost::asio::thread_pool>(std::max(1, model_.options.start_workers));
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "tessera-sched");
    Loop();
  });
  report_thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "tessera-report");
    ReportLoop();
  });
}

void Scheduler::Stop() {
  {
    std::lock_guard lock(model_.mu);
    stopping_ = true;
  }
  model_.scheduler_wake.notify_all();
  model_.report_wake.notify_all();
  if (thread_.joinable()) thread_.join();
  if (report_thread_.joinable()) report_thread_.join();
  // Placements whose commit is under way start from its callback: wait for those (a barrier
  // behind them), without the lock the callbacks take.
  if (pool_) (void)model_.store.CommitAndWait({});
  // Only the scheduler posts work, so none comes after this. A start handed over is marked
  // started in the store: it runs to its end rather than leave a container the next start of
  // the service would take for vanished. Work applies its outcome under mu: joined without it.
  std::unique_ptr<boost::asio::thread_pool> pool;
  {
    std::lock_guard lock(model_.mu);
    pool = std::move(pool_);
  }
  if (pool) pool->join();
}

void Scheduler::Loop() {
  std::unique_lock lock(model_.mu);
  // A zero interval would spin.
  const auto sweep_interval =
      std::max(model_.options.retention.sweep_interval, std::chrono::milliseconds(10));
  next_sweep_ = std::chrono::steady_clock::now();
  adopted_ = false;
  while (!stopping_) {
    const bool failing = WaitForWorkLocked(lock);
    if (stopping_) break;
    const bool writable = RetryAndSweepLocked(failing, sweep_interval);
    ApplyExitsLocked();
    placement::Fleet* fleet = SyncFleetLocked();
    if (fleet && (!adopted_ || adopted_nodes_ != model_.placement_nodes)) {
      AdoptRunningLocked();
      model_.reschedule = true;
      model_.QueueChanged();
    }
    std::vector<Mutation> mutations;
    EnforceLimitsLocked(mutations);
    if (!mutations.empty()) model_.Commit(std::move(mutations), nullptr);
    while (!model_.to_stop.empty()) {
      StopOnPoolLocked(model_.to_stop.front());
      model_.to_stop.pop_front();
    }
    // Nothing is placed while the store cannot record it.
    if (!model_.reschedule || !writable) continue;
    model_.reschedule = false;
    if (may_place_ && !may_place_()) {
      // No longer (or not surely) the leader: nothing is placed; the replica that leads places
      // what is pending, or this one once it leads again. Asked again later rather than spun
      // on: leadership returns through the elector.
      model_.reschedule = true;
      model_.idle.notify_all();
      model_.scheduler_wake.wait_for(lock, std::chrono::milliseconds(100),
                                     [this] { return stopping_; });
      continue;
    }
    PlacePendingLocked(fleet);
    model_.idle.notify_all();
  }
}

bool Scheduler::WaitForWorkLocked(std::unique_lock<std::mutex>& lock) {
  // Duration limits are wall-clock times (they survive restarts); the sweep is monotonic. A
  // limit armed while this waits (a start returning) wakes it to wait again until then.
  auto until = next_sweep_;
  if (!deadlines_.empty()) {
    const auto in = std::chrono::milliseconds(deadlines_.begin()->first - fleet::NowMs());
    until = std::min(
        until, std::chrono::steady_clock::now() + std::max(in, std::chrono::milliseconds::zero()));
  }
  const bool failing = model_.store.WriteFailure().has_value();
  if (failing || !model_.unsaved.empty()) until = std::min(until, next_retry_);
  limits_changed_ = false;
  model_.scheduler_wake.wait_until(lock, until, [this, failing] {
    return stopping_ || limits_changed_ || !model_.exits.empty() || !model_.to_stop.empty() ||
           (!failing && model_.reschedule &&
            (!model_.pending.empty() || !model_.mig_pending.empty() ||
             !model_.share_pending.empty() || model_.queue->pending_count() > 0)) ||
           std::chrono::steady_clock::now() >= next_sweep_ ||
           (!deadlines_.empty() && fleet::NowMs() >= deadlines_.begin()->first);
  });
  return failing;
}

bool Scheduler::RetryAndSweepLocked(bool failing, std::chrono::milliseconds sweep_interval) {
  // While the store cannot write: how often what it could not write is tried again.
  constexpr auto kRetryInterval = std::chrono::seconds(1);
  const auto now = std::chrono::steady_clock::now();
  // What the store could not write is written again (a write that succeeds also tells the
  // store it can write again); until then nothing new is decided that would need a write.
  if ((failing || !model_.unsaved.empty()) && now >= next_retry_) {
    model_.RetryUnsaved();
    next_retry_ = now + kRetryInterval;
  }
  const bool writable = !model_.store.WriteFailure();
  if (now >= next_sweep_) {
    if (writable) {
      SweepRetentionLocked();
      ExpireAuditLocked();
    }
    next_sweep_ = now + sweep_interval;
  }
  return writable;
}

void Scheduler::ApplyExitsLocked() {
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
  }
}

void Scheduler::PlacePendingLocked(placement::Fleet* fleet) {
  std::vector<Mutation> mutations;
  // Containers without GPUs never wait for GPUs: they start in submission order at once.
  std::vector<std::string> to_start;
  for (const auto& id : model_.pending) {
    auto found = model_.containers.find(id);
    if (found == model_.containers.end() || found->second.state != ContainerState::kPending ||
        found->second.started)
      continue;
    found->second.started = true;
    mutations.push_back(found->second);
    to_start.push_back(id);
  }
  model_.pending.clear();
  model_.reserved_gpus.clear();
  if (fleet && model_.queue->pending_count() > 0) PassLocked(*fleet, mutations, to_start);
  PlaceMigLocked(&mutations, &to_start, nullptr);
  PlaceSharesLocked(&mutations, &to_start, nullptr);
  // Host ports in the same transaction as the placement.
  PublishPortsLocked(model_, to_start, mutations);
  ++model_.passes;
  model_.QueueChanged();
  if (!mutations.empty()) {
    // They start once their placement is durable; a placement the store could not write
    // never starts. Busy until then.
    model_.busy++;
    model_.Commit(std::move(mutations), [this, to_start = std::move(to_start)](Status status) {
      std::lock_guard lock(model_.mu);
      model_.busy--;
      StartPlacedLocked(to_start, status);
    });
  }
}

void Scheduler::StartPlacedLocked(const std::vector<std::string>& ids, const Status& recorded) {
  std::vector<Mutation> mutations;
  for (const auto& id : ids) {
    auto it = model_.containers.find(id);
    if (it == model_.containers.end() || it->second.state != ContainerState::kPending ||
        !it->second.started)
      continue;
    if (!recorded || !pool_) {
      const std::string why = !recorded ? "not started: its placement could not be recorded: " +
                                              recorded.error().message
                                        : "not started: the scheduler stopped";
      model_.FinishContainer(it->second, backends::ExitInfo{std::nullopt, true, why}, mutations);
      continue;
    }
    StartOnPoolLocked(id, mutations);
  }
  if (!mutations.empty()) {
    model_.reschedule = true;
    model_.Commit(std::move(mutations), nullptr);
    model_.scheduler_wake.notify_one();
  }
  model_.idle.notify_all();
}

namespace {

// The queue's waiting requests as a pass on `fleet` (a copy) would leave them, with places and
// reasons (without the lock: on a snapshot of the queue, which is freed once read).
void AddQueueWaits(std::optional<scheduling::Scheduler::Snapshot>& snapshot,
                   placement::Fleet& fleet, double now_s,
                   const std::unordered_map<std::string, std::string>& names, size_t beside,
                   Model::QueueReport& report) {
  scheduling::Scheduler queue = scheduling::Scheduler::FromSnapshot(*snapshot);
  snapshot.reset();
  const auto pass = queue.Schedule(fleet, now_s, /*report=*/true);
  report.entries.reserve(pass.waiting.size() + beside);
  for (const auto& wait : pass.waiting) {
    const scheduling::PendingRequest* request = queue.Request(wait.id);
    if (!request) continue;
    QueueEntry entry;
    entry.id = ContainerIdOf(wait.id);
    entry.tenancy_uid = queue.TenancyOf(wait.id);
    auto name = names.find(entry.tenancy_uid);
    entry.tenancy = name != names.end()                      ? name->second
                    : entry.tenancy_uid.starts_with("name:") ? entry.tenancy_uid.substr(5)
                                                             : entry.tenancy_uid;
    entry.gpus = request->gpus;
    entry.priority = request->priority;
    entry.position = wait.position;
    entry.reason = queue.Describe(wait, pass, fleet, ContainerIdOf);
    if (wait.kind == scheduling::WaitKind::kReserved && wait.reservation >= 0 &&
        wait.reservation < static_cast<int>(pass.reservations.size()))
      entry.reserved_for_uid = queue.TenancyOf(pass.reservations[wait.reservation].holder);
    entry.created_ms = std::llround(request->submitted_s * 1000.0);
    report.entries.push_back(std::move(entry));
  }
}

// MIG requests wait beside the queue (their places follow its), then shares of a GPU; the
// report's indices by container and by tenancy follow.
void FinishQueueReport(std::vector<QueueEntry>& mig_waiting, std::vector<QueueEntry>& share_waiting,
                       Model::QueueReport& report) {
  const int base = static_cast<int>(report.entries.size());
  for (auto& entry : mig_waiting) {
    entry.position += base;
    report.entries.push_back(std::move(entry));
  }
  const int after_mig = static_cast<int>(report.entries.size());
  for (auto& entry : share_waiting) {
    entry.position += after_mig;
    report.entries.push_back(std::move(entry));
  }
  for (size_t i = 0; i < report.entries.size(); ++i) {
    report.index.emplace(report.entries[i].id, i);
    report.by_tenancy[report.entries[i].tenancy_uid].push_back(i);
  }
}

}  // namespace

void Scheduler::ReportLoop() {
  std::unique_lock lock(model_.mu);
  while (!stopping_) {
    const bool stale = !model_.queue_report || model_.queue_report->version != model_.queue_version;
    if (!model_.report_wanted || !stale) {
      model_.report_wake.wait(lock);
      continue;
    }
    if (std::chrono::steady_clock::now() < next_report_) {
      model_.report_wake.wait_until(lock, next_report_);
      continue;
    }
    model_.report_wanted = false;
    const auto began = std::chrono::steady_clock::now();
    auto report = std::make_shared<Model::QueueReport>();
    report->version = model_.queue_version;
    // Under the lock: a flat snapshot of the queue and a copy of the fleet (as a pass would see
    // them now), the MIG requests' part, and the tenancies' names. The rest without it.
    placement::Fleet* fleet = SyncFleetLocked();
    std::optional<placement::Fleet> fleet_copy;
    std::optional<scheduling::Scheduler::Snapshot> snapshot;
    if (fleet && model_.queue->pending_count() > 0) {
      fleet_copy = *fleet;
      snapshot = model_.queue->TakeSnapshot();
    }
    std::vector<QueueEntry> mig_waiting;
    PlaceMigLocked(nullptr, nullptr, &mig_waiting);
    std::vector<QueueEntry> share_waiting;
    PlaceSharesLocked(nullptr, nullptr, &share_waiting);
    std::unordered_map<std::string, std::string> names;  // incarnation -> tenancy name
    for (const auto& [name, tenancy] : model_.tenancies)
      names[tenancy.uid] = name;
    const double now_s = static_cast<double>(fleet::NowMs()) / 1000.0;
    const auto locked_for = std::chrono::steady_clock::now() - began;
    lock.unlock();
    if (snapshot)
      AddQueueWaits(snapshot, *fleet_copy, now_s, names, mig_waiting.size() + share_waiting.size(),
                    *report);
    FinishQueueReport(mig_waiting, share_waiting, *report);
    const auto spent = std::chrono::steady_clock::now() - began;
    std::shared_ptr<const Model::QueueReport> old = std::move(report);
    lock.lock();
    model_.queue_report.swap(old);
    ++model_.reports;
    // At most about a tenth of this thread's time goes to reports while the queue keeps
    // changing; a small queue's report is ready again at once.
    next_report_ = std::chrono::steady_clock::now() + 9 * spent;
    spdlog::debug("queue report: {} entries, {:.1f} ms ({:.1f} ms under the lock)",
                  model_.queue_report->entries.size(),
                  std::chrono::duration<double, std::milli>(spent).count(),
                  std::chrono::duration<double, std::milli>(locked_for).count());
    // The report it replaces is freed without the lock.
    lock.unlock();
    old.reset();
    lock.lock();
  }
}

placement::Fleet* Scheduler::SyncFleetLocked() {
  gpu_of_bit_.clear();
  bit_of_gpu_.clear();
  placement::Fleet* fleet = nullptr;
  constexpr size_t kNone = SIZE_MAX;
  if (model_.options.fleet) {
    if (!model_.placement) return nullptr;
    fleet = &*model_.placement;
    for (size_t f = 0; f < model_.placement_nodes.size(); ++f) {
      const Model::Node& node = model_.nodes[model_.placement_nodes[f]];
      std::vector<size_t> bits(fleet->node(static_cast<int>(f)).gpu_count, kNone);
      for (size_t i = 0; i < node.gpus.size(); ++i) {
        const size_t bit = node.planner ? static_cast<size_t>(node.module_of[i] - 1) : i;
        if (bit < bits.size()) bits[bit] = node.gpus[i];
      }
      gpu_of_bit_.push_back(std::move(bits));
    }
  } else {
    if (!model_.chooser) return nullptr;
    const topology::PartitionPlanner* planner = model_.chooser->planner();
    std::vector<size_t> bits(planner ? planner->module_count() : model_.gpus.size(), kNone);
    for (size_t i = 0; i < model_.gpus.size(); ++i) {
      size_t bit = i;
      if (planner) {
        bit = kNone;
        for (const auto& [module, address] : planner->table().pci_addresses)
          if (address == model_.gpus[i].pci_address) bit = static_cast<size_t>(module - 1);
      }
      if (bit < bits.size()) bits[bit] = i;
    }
    if (!host_fleet_) {
      placement::NodeSpec spec;
      spec.name = "this host";
      spec.gpu_count = static_cast<int>(bits.size());
      if (planner) {
        auto created = topology::PartitionPlanner::Create(planner->table());
        if (!created) {
          spdlog::error("placement: {}", created.error().message);
          return nullptr;
        }
        spec.partitions = *created;
      } else {
        // The chooser is the model's for the life of the service (set before threads start): a
        // non-owning pointer to its scorer.
        spec.scorer = std::shared_ptr<const topology::GpuSetScorer>(std::shared_ptr<void>(),
                                                                    &model_.chooser->scorer());
      }
      auto created = placement::Fleet::Create({std::move(spec)});
      if (!created) {
        spdlog::error("placement: {}", created.error().message);
        return nullptr;
      }
      host_fleet_ = std::move(*created);
    }
    fleet = &*host_fleet_;
    gpu_of_bit_.push_back(std::move(bits));
  }
  for (size_t f = 0; f < gpu_of_bit_.size(); ++f) {
    topology::GpuMask free = 0;
    for (size_t bit = 0; bit < gpu_of_bit_[f].size(); ++bit) {
      const size_t index = gpu_of_bit_[f][bit];
      if (index == kNone) continue;
      bit_of_gpu_[index] = {static_cast<int>(f), static_cast<int>(bit)};
      const GpuRecord& gpu = model_.gpus[index];
      // A GPU in MIG mode is handed out by slice only (PlaceMigLocked).
      if (gpu.state == LeaseState::kFree && gpu.available && !gpu.mig_enabled)
        free |= topology::GpuMask{1} << bit;
    }
    if (auto status = fleet->SetFreeMask(static_cast<int>(f), free); !status)
      spdlog::error("placement: node {}: {}", fleet->node(static_cast<int>(f)).name,
                    status.error().message);
  }
  return fleet;
}

void Scheduler::AdoptRunningLocked() {
  adopted_ = true;
  adopted_nodes_ = model_.placement_nodes;
  deadlines_.clear();
  for (const auto& id : model_.container_order) {
    const ContainerRecord& container = model_.containers.at(id);
    // MIG containers hold slices and share containers shares, not whole GPUs of the placement
    // model: they count beside the queue (Model::AddMigUse), never as whole GPUs in it.
    if (fleet::IsTerminal(container.state) || !container.started || container.gpus.empty() ||
        container.spec.mig.count > 0 || container.spec.share)
      continue;
    placement::Placement placement;
    for (const auto& gpu_id : container.gpus) {
      GpuRecord* gpu = model_.FindGpu(gpu_id);
      if (!gpu) continue;
      auto at = bit_of_gpu_.find(static_cast<size_t>(gpu - model_.gpus.data()));
      if (at == bit_of_gpu_.end()) continue;
      placement.node = at->second.first;
      placement.gpus |= topology::GpuMask{1} << at->second.second;
    }
    const int64_t started_ms = container.started_ms ? container.started_ms : fleet::NowMs();
    const auto request = PendingRequestOf(container);
    model_.queue->Started(request.id, request.tenancy, placement,
                          static_cast<int>(container.gpus.size()),
                          static_cast<double>(started_ms) / 1000.0, request.max_duration_s,
                          request.priority, request.preemptible);
    if (container.state == ContainerState::kRunning && container.spec.max_duration_s > 0)
      deadlines_.emplace(started_ms + container.spec.max_duration_s * 1000, id);
  }
}

void Scheduler::EnforceLimitsLocked(std::vector<Mutation>& out) {
  const int64_t now = fleet::NowMs();
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    const std::string id = deadlines_.begin()->second;
    deadlines_.erase(deadlines_.begin());
    auto it = model_.containers.find(id);
    if (it == model_.containers.end() || it->second.state != ContainerState::kRunning ||
        it->second.stop_requested)
      continue;
    model_.StopContainer(it->second,
                         "stopped at its limit: maxDurationSeconds " +
                             std::to_string(it->second.spec.max_duration_s),
                         out);
  }
}

void Scheduler::PassLocked(placement::Fleet& fleet, std::vector<Mutation>& out,
                           std::vector<std::string>& to_start) {
  // Without report: it stops once nothing more can start and no reservation can change.
  auto pass = model_.queue->Schedule(fleet, static_cast<double>(fleet::NowMs()) / 1000.0,
                                     /*report=*/false);
  // GPUs held for a waiting whole-GPU request take no new share.
  for (const auto& reservation : pass.reservations) {
    const auto node = static_cast<size_t>(reservation.node);
    if (node >= gpu_of_bit_.size()) continue;
    for (int bit : topology::MaskToIndices(reservation.gpus))
      if (static_cast<size_t>(bit) < gpu_of_bit_[node].size())
        model_.reserved_gpus.insert(gpu_of_bit_[node][bit]);
  }
  auto container_of = [this](scheduling::RequestId id) -> ContainerRecord* {
    auto it = model_.containers.find(ContainerIdOf(id));
    return it == model_.containers.end() ? nullptr : &it->second;
  };
  for (const auto& admission : pass.admitted) {
    ContainerRecord* container = container_of(admission.id);
    const auto node = static_cast<size_t>(admission.placement.node);
    if (!container || container->state != ContainerState::kPending || container->started ||
        node >= gpu_of_bit_.size()) {
      spdlog::error("scheduling: admitted request {:016x} is no pending container", admission.id);
      model_.queue->Finished(admission.id, static_cast<double>(fleet::NowMs()) / 1000.0);
      continue;
    }
    container->gpus.clear();
    for (int bit : topology::MaskToIndices(admission.placement.gpus)) {
      auto& gpu = model_.gpus[gpu_of_bit_[node][bit]];
      gpu.tenancy = container->spec.tenancy;
      gpu.container_id = container->id;
      model_.SetGpuState(gpu, LeaseState::kReserved, "", out);
      container->gpus.push_back(gpu.id());
    }
    container->started = true;
    container->reason.clear();
    const double waited = static_cast<double>(fleet::NowMs() - container->created_ms) / 1000.0;
    model_.meter.ObserveWait(container->tenancy_uid, container->spec.tenancy, waited);
    spdlog::info("container {}: placed ({} GPUs of tenancy {}{}) after {:.3f} s in the queue",
                 container->id, container->gpus.size(), container->spec.tenancy,
                 admission.backfill ? ", backfilled into reserved GPUs" : "", waited);
    out.push_back(*container);
    to_start.push_back(container->id);
  }
  for (const auto& preemption : pass.preemptions) {
    const ContainerRecord* holder = container_of(preemption.for_request);
    for (scheduling::RequestId victim : preemption.victims) {
      ContainerRecord* container = container_of(victim);
      if (!container || container->stop_requested || fleet::IsTerminal(container->state)) continue;
      spdlog::info("scheduling: preempting {} for {}", container->id,
                   holder ? holder->id : std::string("?"));
      model_.StopContainer(*container, "preempted", out);
    }
  }
}

namespace {

// What a start takes from the record as it stands: the spec, and where its ports are published.
backends::StartRequest StartRequestOf(const ContainerRecord& container) {
  backends::StartRequest request;
  request.id = container.id;
  request.tenancy = container.spec.tenancy;
  request.image = container.spec.image;
  request.command = container.spec.command;
  request.env = container.spec.env;
  request.isolation = container.spec.isolation;
  request.network = container.spec.network;
  request.ports = container.published;
  request.ready = container.spec.ready;
  return request;
}

}  // namespace

void Scheduler::StartOnPoolLocked(const std::string& id, std::vector<Mutation>& out) {
  auto it = model_.containers.find(id);
  if (it == model_.containers.end()) return;
  const auto& container = it->second;
  backends::StartRequest request = StartRequestOf(container);
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
  std::optional<ShareStart> share;
  if (container.spec.share) {
    auto start = shared_.StartOfLocked(container);
    if (!start) {
      model_.FinishContainer(it->second,
                             backends::ExitInfo{std::nullopt, true, start.error().message}, out);
      return;
    }
    share = std::move(*start);
  }
  for (const auto& gpu_id : container.gpus) {
    if (auto* gpu = model_.FindGpu(gpu_id)) {
      request.gpu_pci_addresses.push_back(gpu->pci_address);
      request.node = gpu->node;
      if (container.mig_devices.empty()) {
        request.cdi_devices.push_back(gpu->cdi_device);
        continue;
      }
      // Its MIG devices only (a MIG request's, or the slice a share of a MIG slice is on): each
      // brings the parent's node and its two capability nodes.
      for (const auto& slice : gpu->mig_slices)
        if (std::find(container.mig_devices.begin(), container.mig_devices.end(), slice.id) !=
            container.mig_devices.end())
          request.cdi_devices.push_back(slice.cdi_device);
    }
  }
  model_.busy++;
  model_.starting.insert(id);
  boost::asio::post(
      *pool_, [this, request = std::move(request), share = std::move(share)]() mutable {
        Status status = Ok();
        if (share) {
          // Its GPU ready for it first: nothing starts before the MPS marker holds the hash of a
          // config covering its share.
          auto edits = shared_.Prepare(*share);
          if (edits) {
            for (const auto& [key, value] : edits->env)
              request.env[key] = value;
            for (const auto& mount : edits->mounts)
              request.binds.push_back({mount.host_path, mount.container_path, mount.read_only});
          } else {
            status = edits.error().WithContext("share of GPU " + share->pci_address);
          }
        }
        if (status)
          status = backend_.Start(request,
                                  [this](const std::string& cid, const backends::ExitInfo& info) {
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
        model_.MeterStarted(started);
        model_.ShareStarted(started, mutations);
        if (model_.Probed(started)) model_.probed.insert(id);
        if (started.spec.max_duration_s > 0) {
          deadlines_.emplace(started.started_ms + started.spec.max_duration_s * 1000, id);
          limits_changed_ = true;
          model_.scheduler_wake.notify_one();
        }
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

void Scheduler::ExpireAuditLocked() {
  if (audit_expiring_ || !pool_) return;
  audit_expiring_ = true;
  model_.busy++;
  const int64_t before_ms = fleet::NowMs() - model_.options.audit_retention.count();
  boost::asio::post(*pool_, [this, before_ms] {
    // Small batches: each is one short transaction, so submissions' commits interleave.
    constexpr size_t kBatch = 1000;
    size_t total = 0;
    for (;;) {
      auto expired = model_.store.ExpireAudit(before_ms, kBatch);
      if (!expired) {
        spdlog::warn("audit retention: {}", expired.error().message);
        break;
      }
      total += *expired;
      if (*expired < kBatch) break;
    }
    if (total > 0) spdlog::info("audit retention: removed {} records", total);
    std::lock_guard lock(model_.mu);
    audit_expiring_ = false;
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
  // So is one whose usage record the store could not write yet: it is written first.
  const bool usage_unsaved = !model_.unsaved.usage.empty();
  auto pinned = [this, usage_unsaved](const ContainerRecord& container) {
    if (usage_unsaved && model_.UsageUnsaved(container.id)) return true;
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
    // A keyed container's ID is retired for good: the key's next submission is another run and
    // gets another ID, so no record of this run can ever be taken for that one's.
    const bool keyed = !container.idempotency_key.empty();
    if (keyed) {
      auto key = model_.idempotency.find(container.tenancy_uid + '\n' + container.idempotency_key);
      if (key != model_.idempotency.end() && key->second == id) model_.idempotency.erase(key);
      model_.retired_ids.insert(id);
    }
    model_.container_counts[static_cast<int>(container.state)]--;
    if (container.started) in_backend.push_back(id);
    mutations.push_back(fleet::ContainerDeletion{id, keyed});
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

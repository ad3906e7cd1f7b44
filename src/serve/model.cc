#include "serve/model.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "serve/audit.h"
#include "serve/queue.h"
#include "serve/record_names.h"

namespace tessera::serve {

tenancy::StorageEntitlements Model::StorageOf(const fleet::Tenancy& record) {
  auto it = record.extensions.find(std::string(tenancy::kStorageExtension));
  if (it == record.extensions.end()) return {};
  auto parsed = tenancy::ParseStorageEntitlements(it->second);
  if (!parsed) {
    spdlog::warn("tenancy {}: stored storage entitlements unreadable: {}", record.name,
                 parsed.error().message);
    return {};
  }
  return std::move(*parsed);
}

GpuRecord* Model::FindGpu(const std::string& gpu_id) {
  // Split the ID ("<PCI>" or "<PCI>@<node>", GpuRecord::GpuId) once rather than building every
  // GPU's ID: with a fleet of nodes this runs over hundreds of GPUs per lookup.
  const auto at = gpu_id.find('@');
  const std::string_view pci = std::string_view(gpu_id).substr(0, at);
  const std::string_view node =
      at == std::string::npos ? std::string_view() : std::string_view(gpu_id).substr(at + 1);
  for (auto& gpu : gpus)
    if (gpu.pci_address == pci && gpu.node == node) return &gpu;
  return nullptr;
}

void Model::SetGpuState(GpuRecord& gpu, LeaseState state, std::string reason,
                        std::vector<Mutation>& out) {
  if (auto status = fleet::CheckLeaseTransition(gpu.state, state); !status) {
    spdlog::error("GPU {}: {}", gpu.id(), status.error().message);
  }
  spdlog::info("GPU {}: {} -> {}{}{}", gpu.id(), fleet::LeaseStateName(gpu.state),
               fleet::LeaseStateName(state), reason.empty() ? "" : ": ", reason);
  gpu.state = state;
  gpu.reason = std::move(reason);
  if (state == LeaseState::kFree || state == LeaseState::kDraining ||
      state == LeaseState::kQuarantined) {
    gpu.tenancy.clear();
    gpu.container_id.clear();
  }
  gpu.updated_ms = fleet::NowMs();
  lease_dirty_ = true;
  QueueChanged();
  out.push_back(gpu);
}

void Model::SetContainerState(ContainerRecord& container, ContainerState state) {
  container_counts[static_cast<int>(container.state)]--;
  container.state = state;
  container_counts[static_cast<int>(state)]++;
}

void Model::ReleaseGpus(ContainerRecord& container, std::vector<Mutation>& out) {
  if (container.spec.mig.count > 0 && container.started && !container.mig_devices.empty())
    AddMigUse(QueueTenancy(container), -container.mig_gpus);
  for (const auto& id : container.gpus) {
    auto* gpu = FindGpu(id);
    if (!gpu) continue;
    if (container.spec.mig.count > 0) {
      ReleaseMigSlices(*gpu, container, out);
      continue;
    }
    if (container.spec.share) {
      ReleaseShare(*gpu, container, out);
      continue;
    }
    if (gpu->container_id != container.id) continue;
    if (gpu->state == LeaseState::kReserved || gpu->state == LeaseState::kActive) {
      SetGpuState(*gpu, LeaseState::kReleasing, "", out);
      to_check.push_back(id);
    }
  }
  checker_wake.notify_one();
  // A faulted GPU's recovery waits for its containers to end.
  recovery_wake.notify_all();
}

void Model::ReleaseMigSlices(GpuRecord& gpu, const ContainerRecord& container,
                             std::vector<Mutation>& out) {
  for (auto& slice : gpu.mig_slices) {
    if (slice.container_id != container.id) continue;
    slice.container_id.clear();
    slice.tenancy.clear();
  }
  // The container held slices of this parent (it is in its `gpus`), even one a changed layout
  // no longer lists: with no holder left, the lease ends.
  if (gpu.state != LeaseState::kReserved && gpu.state != LeaseState::kActive) return;
  for (const auto& slice : gpu.mig_slices)
    if (!slice.container_id.empty())
      return PassLeaseOn(gpu, container, slice.container_id, slice.tenancy, out);
  // The last slice: the whole GPU is checked, the check following this holder.
  PassLeaseOn(gpu, container, "", "", out);
}

void Model::ReleaseShare(GpuRecord& gpu, const ContainerRecord& container,
                         std::vector<Mutation>& out) {
  const size_t before = gpu.shares.size();
  std::string mig_device;  // the slice it shared, if any
  std::erase_if(gpu.shares, [&](const fleet::ShareHolder& holder) {
    if (holder.container_id != container.id) return false;
    mig_device = holder.mig_device;
    return true;
  });
  if (gpu.shares.size() != before && container.started) {
    // Its tenancy's GPUs in use shrink by what it was charged (ShareHolds: the whole GPU with
    // its last share there), and the GPU's bill follows.
    const std::string key = QueueTenancy(container);
    const bool still =
        std::any_of(gpu.shares.begin(), gpu.shares.end(), [&](const fleet::ShareHolder& holder) {
          return holder.tenancy_uid == container.tenancy_uid;
        });
    AddMigUse(key, -share_holds.UseLeaving(*container.spec.share, still, container.share_gpus));
    const int64_t held_until = share_holds.Left(gpu, container, container.started_ms > 0,
                                                container.finished_ms, meter, out);
    // Fair share was charged up to now: the time after the hold's end goes back.
    const int64_t now_ms = fleet::NowMs();
    if (queue && held_until > 0 && held_until < now_ms)
      queue->ChargePast(key, -1.0, static_cast<double>(held_until) / 1000.0,
                        static_cast<double>(now_ms) / 1000.0);
  }
  if (!mig_device.empty()) LeaveSharedSlice(gpu, mig_device);
  if (gpu.state != LeaseState::kReserved && gpu.state != LeaseState::kActive) return;
  if (gpu.mig_enabled) {
    // A GPU in MIG mode: its lease lasts while any slice is held, whole or by shares.
    for (const auto& slice : gpu.mig_slices)
      if (!slice.container_id.empty())
        return PassLeaseOn(gpu, container, slice.container_id, slice.tenancy, out);
    return PassLeaseOn(gpu, container, "", "", out);
  }
  if (!gpu.shares.empty())
    return PassLeaseOn(gpu, container, gpu.shares.front().container_id, gpu.shares.front().tenancy,
                       out);
  // The last share: its MPS daemon goes (Model::unshare, run by the checker), then the whole GPU
  // is checked, the check following this holder.
  PassLeaseOn(gpu, container, "", "", out);
}

void Model::LeaveSharedSlice(GpuRecord& gpu, const std::string& mig_device) {
  for (auto& slice : gpu.mig_slices) {
    if (slice.id != mig_device) continue;
    // The slice is named after one of the shares still on it; with none left it stays shared
    // (taken by nothing) until its MPS daemon is torn down (SharedGpus), then it is free again.
    slice.container_id.clear();
    slice.tenancy.clear();
    for (const auto& holder : gpu.shares) {
      if (holder.mig_device != mig_device) continue;
      slice.container_id = holder.container_id;
      slice.tenancy = holder.tenancy;
      break;
    }
  }
}

void Model::PassLeaseOn(GpuRecord& gpu, const ContainerRecord& container,
                        const std::string& next_container, const std::string& next_tenancy,
                        std::vector<Mutation>& out) {
  if (!next_container.empty()) {
    // Others still run on it: the lease stays, named after one of them.
    if (gpu.container_id == container.id) {
      gpu.container_id = next_container;
      gpu.tenancy = next_tenancy;
      lease_dirty_ = true;
      out.push_back(gpu);
    }
    return;
  }
  gpu.container_id = container.id;
  gpu.tenancy = container.spec.tenancy;
  SetGpuState(gpu, LeaseState::kReleasing, "", out);
  to_check.push_back(gpu.id());
}

void Model::DropStalePending(std::deque<std::string>& pending,
                             const std::unordered_map<std::string, int>& waiting) {
  size_t live = 0;
  for (const auto& [uid, count] : waiting)
    live += static_cast<size_t>(std::max(count, 0));
  if (pending.size() <= 2 * live + 64) return;
  std::erase_if(pending, [this](const std::string& id) {
    auto it = containers.find(id);
    return it == containers.end() || it->second.state != fleet::ContainerState::kPending ||
           it->second.started;
  });
}

void Model::SortBySubmission(std::deque<std::string>& ids) const {
  std::sort(ids.begin(), ids.end(), [this](const std::string& a, const std::string& b) {
    return container_position.at(a) < container_position.at(b);
  });
}

void Model::EnqueueShare(const ContainerRecord& container) {
  share_pending.push_back(container.id);
  ++share_waiting[QueueTenancy(container)];
}

void Model::ShareLeftWaiting(const ContainerRecord& container) {
  auto it = share_waiting.find(QueueTenancy(container));
  if (it == share_waiting.end()) return;
  if (--it->second <= 0) share_waiting.erase(it);
}

int Model::SharePendingOf(const std::string& tenancy) const {
  auto it = share_waiting.find(tenancy);
  return it == share_waiting.end() ? 0 : it->second;
}

void Model::StopContainer(ContainerRecord& container, std::string reason,
                          std::vector<Mutation>& out) {
  spdlog::info("container {}: stopping: {}", container.id, reason);
  out.push_back(
      ServiceAudit({"container.stop", "container", container.id, container.spec.tenancy}, reason));
  container.stop_requested = true;
  container.reason = std::move(reason);
  out.push_back(container);
  if (container.state == ContainerState::kRunning) {
    to_stop.push_back(container.id);
    scheduler_wake.notify_one();
  }
}

void Model::AddMigUse(const std::string& tenancy, double gpus) {
  double held = mig_in_use[tenancy] + gpus;
  // Sums of sevenths drift: what is left of a tenancy without slices is rounding.
  if (held < 1e-9) {
    held = 0;
    mig_in_use.erase(tenancy);
  } else {
    mig_in_use[tenancy] = held;
  }
  if (queue) queue->SetOtherUse(tenancy, held, static_cast<double>(fleet::NowMs()) / 1000.0);
  QueueChanged();
}

void Model::EnqueueMig(const ContainerRecord& container) {
  mig_pending.push_back(container.id);
  ++mig_waiting[QueueTenancy(container)];
  QueueChanged();
}

void Model::MigLeftWaiting(const ContainerRecord& container) {
  QueueChanged();
  auto it = mig_waiting.find(QueueTenancy(container));
  if (it == mig_waiting.end()) return;
  if (--it->second <= 0) mig_waiting.erase(it);
}

int Model::MigPendingOf(const std::string& tenancy) const {
  auto it = mig_waiting.find(tenancy);
  return it == mig_waiting.end() ? 0 : it->second;
}

void Model::FinishContainer(ContainerRecord& container, const backends::ExitInfo& info,
                            std::vector<Mutation>& out, bool audited) {
  if (fleet::IsTerminal(container.state)) return;
  if (container.spec.mig.count > 0 && container.state == ContainerState::kPending &&
      !container.started)
    MigLeftWaiting(container);
  if (container.spec.share && container.state == ContainerState::kPending && !container.started)
    ShareLeftWaiting(container);
  MarkEnded(container, info);
  // Billing follows the runtime: the end it reports (an exit while the service was down), never
  // later than now nor before the start; nothing at all when it says the container never ran.
  const int64_t now_ms = fleet::NowMs();
  int64_t finished_ms = info.finished_ms > 0 ? std::min(info.finished_ms, now_ms) : now_ms;
  // A GPU fault stopped it: billed up to the fault, not to the exit the stop brought.
  if (auto fault = fault_ends.find(container.id); fault != fault_ends.end()) {
    finished_ms = std::min(finished_ms, fault->second);
    fault_ends.erase(fault);
  }
  if (container.started_ms > 0) finished_ms = std::max(finished_ms, container.started_ms);
  container.finished_ms = finished_ms;
  const bool ran = container.started_ms > 0 && !info.never_started;
  if (queue) ChargeEnded(container, now_ms, ran);
  const std::string outcome =
      std::string(fleet::ContainerStateName(container.state)) +
      (container.exit_code ? " with code " + std::to_string(*container.exit_code) : "") +
      (container.reason.empty() ? "" : ": " + container.reason);
  spdlog::info("container {}: {}", container.id, outcome);
  if (audited)
    out.push_back(ServiceAudit(
        {container.state == ContainerState::kFailed ? "container.fail" : "container.exit",
         "container", container.id, container.spec.tenancy},
        outcome));
  // What a node agent measured (Kubernetes mode: the GpuLease's status.measured) comes with the
  // exit; this host's telemetry has been adding to the record all along.
  if (info.measured) {
    const fleet::MeasuredUsage mine = container.measured.value_or(fleet::MeasuredUsage{});
    container.measured =
        fleet::MeasuredUsage{std::max(mine.sm_seconds, info.measured->sm_seconds),
                             std::max(mine.memory_gib_seconds, info.measured->memory_gib_seconds),
                             std::max(mine.energy_joules, info.measured->energy_joules)};
  }
  ReleaseGpus(container, out);
  // Its ports are free for the next container once it has ended (the record keeps where they
  // were published, as history).
  ports.Release(container.id);
  probed.erase(container.id);
  container.ready.reset();
  out.push_back(container);
  MeterEnded(container, ran, out);
}

void Model::MarkEnded(ContainerRecord& container, const backends::ExitInfo& info) {
  // A stop the scheduler decided (duration limit, preemption) set its reason already.
  const bool stop_reason = container.stop_requested && !container.reason.empty();
  if (info.failed) {
    SetContainerState(container, ContainerState::kFailed);
    if (!stop_reason) container.reason = info.reason;
  } else {
    SetContainerState(container, ContainerState::kExited);
    container.exit_code = info.exit_code;
    if (container.stop_requested && !stop_reason) container.reason = "stopped by request";
  }
}

void Model::ChargeEnded(const ContainerRecord& container, int64_t now_ms, bool ran) {
  const int64_t finished_ms = container.finished_ms;
  const int64_t ended_ms = ran ? finished_ms : container.started_ms;
  const double gpus = fleet::GpuEquivalents(container);
  const auto request = RequestIdOf(container.id);
  const double now_s = static_cast<double>(now_ms) / 1000.0;
  queue->Cancel(request);
  // Fair share is charged as the bill is: up to the end the runtime reports. A run nobody
  // counted (it ended while the service was down) is charged now.
  // MIG slices and shares are counted beside the queue (AddMigUse), by their fraction.
  const bool beside_queue = container.spec.mig.count > 0 || container.spec.share.has_value();
  // A share on a GPU its tenancy pays whole is corrected with the hold, when it ends
  // (ReleaseShare).
  const bool corrected_later = container.spec.share && share_holds.whole(*container.spec.share);
  if (!queue->Finished(request, now_s, static_cast<double>(ended_ms) / 1000.0) && ran &&
      !beside_queue && gpus > 0)
    queue->ChargePast(QueueTenancy(container), gpus,
                      static_cast<double>(container.started_ms) / 1000.0,
                      static_cast<double>(finished_ms) / 1000.0);
  if (beside_queue && !corrected_later && container.started_ms > 0 && ended_ms < now_ms)
    queue->ChargePast(QueueTenancy(container), -gpus, static_cast<double>(ended_ms) / 1000.0,
                      now_s);
  QueueChanged();
}

void Model::MeterEnded(const ContainerRecord& container, bool ran, std::vector<Mutation>& out) {
  std::string gpu_model;
  if (!container.gpus.empty())
    if (const auto* gpu = FindGpu(container.gpus.front())) gpu_model = gpu->model;
  // Metered in the same commit that releases its GPUs: billing and leases cannot disagree.
  if (auto usage = UsageOf(container, gpu_model); ran && usage.gpus > 0) {
    meter.Add(usage);
    out.push_back(std::move(usage));
  } else {
    meter.Stopped(container.tenancy_uid, container.id);
  }
}

void Model::MeterStarted(const ContainerRecord& container) {
  const double gpus = fleet::GpuEquivalents(container);
  if (container.started_ms <= 0 || gpus <= 0) return;
  meter.Started(container.tenancy_uid, container.spec.tenancy, container.id, gpus,
                container.started_ms, container.measured);
}

void Model::ShareStarted(const ContainerRecord& container, std::vector<Mutation>& out) {
  if (!container.spec.share || container.gpus.size() != 1) return;
  if (const GpuRecord* gpu = FindGpu(container.gpus.front()))
    share_holds.Started(*gpu, container, meter, out);
}

void Model::AddContainer(ContainerRecord container) {
  container_counts[static_cast<int>(container.state)]++;
  if (!container.idempotency_key.empty())
    idempotency[container.tenancy_uid + '\n' + container.idempotency_key] = container.id;
  container_position[container.id] = container_order.size();
  container_order.push_back(container.id);
  HoldPortsOf(container);
  std::string id = container.id;
  containers.emplace(std::move(id), std::move(container));
}

void Model::HoldPortsOf(const ContainerRecord& container) {
  // A placed container that has not ended holds the host ports its record names (written with
  // its placement): after a restart, before anything new is placed.
  if (fleet::IsTerminal(container.state) || !container.started) return;
  for (const auto& port : container.published)
    if (port.host_port > 0 && !ports.Hold(container.id, port.host_port))
      spdlog::error("container {}: host port {} is held by container {} as well", container.id,
                    port.host_port, ports.HolderOf(port.host_port));
  if (container.state == ContainerState::kRunning && Probed(container)) probed.insert(container.id);
}

bool Model::Probed(const ContainerRecord& container) const {
  // Its readiness probe; or, where the backend chooses the addresses (fleet mode), its ports.
  return container.spec.ready || (options.fleet && !container.spec.ports.empty());
}

void Model::RemoveContainer(const std::string& id) {
  auto it = containers.find(id);
  if (it == containers.end()) return;
  const ContainerRecord& container = it->second;
  ports.Release(id);
  probed.erase(id);
  if (!container.idempotency_key.empty()) {
    auto key = idempotency.find(container.tenancy_uid + '\n' + container.idempotency_key);
    if (key != idempotency.end() && key->second == id) idempotency.erase(key);
  }
  container_counts[static_cast<int>(container.state)]--;
  auto position = container_position.find(id);
  const size_t from = position->second;
  container_position.erase(position);
  containers.erase(it);
  container_order.erase(container_order.begin() + static_cast<ptrdiff_t>(from));
  for (size_t i = from; i < container_order.size(); ++i)
    container_position[container_order[i]] = i;
}

std::shared_ptr<const Model::QueueReport> Model::ReadQueueReport() {
  if (!queue_report || queue_report->version != queue_version) {
    report_wanted = true;
    report_wake.notify_one();
  }
  return queue_report;
}

Status Model::WriteRefusal() const {
  if (auto failure = store.WriteFailure())
    return Unavailable("the store cannot write (" + *failure +
                       "); changes are refused until a write succeeds again");
  return Ok();
}

Result<const fleet::Tenancy*> Model::EnsureTenancy(const std::string& name,
                                                   std::vector<Mutation>& out) {
  if (auto it = tenancies.find(name); it != tenancies.end()) return &it->second;
  auto uid = fleet::RandomHex(8);
  if (!uid) return uid.error();
  fleet::Tenancy tenancy;
  tenancy.name = name;
  tenancy.uid = std::move(*uid);
  tenancy.created_ms = fleet::NowMs();
  out.push_back(tenancy);
  return &(tenancies[name] = std::move(tenancy));
}

void Model::Commit(std::vector<Mutation> mutations, std::function<void(Status)> done) {
  if (lease_dirty_) WriteLeaseFile();
  if (mutations.empty()) return store.Commit({}, std::move(done));
  // What to write again should this commit fail: records by identity (their state then is
  // written), deletions and usage records as they are.
  Unsaved keep;
  for (const auto& mutation : mutations) {
    std::visit(
        [&keep](const auto& value) {
          using T = std::decay_t<decltype(value)>;
          if constexpr (std::is_same_v<T, ContainerRecord>) keep.containers.insert(value.id);
          if constexpr (std::is_same_v<T, GpuRecord>) keep.gpus.insert(value.id());
          if constexpr (std::is_same_v<T, fleet::Tenancy>) keep.tenancies.insert(value.name);
          if constexpr (std::is_same_v<T, fleet::TokenRecord>) keep.tokens.insert(value.sha256);
          if constexpr (std::is_same_v<T, fleet::UsageRecord>) keep.usage.push_back(value);
          if constexpr (std::is_same_v<T, fleet::TelemetryCursor>) keep.cursors = true;
          if constexpr (std::is_same_v<T, fleet::AuditRecord>) keep.audit.push_back(value);
          if constexpr (std::is_same_v<T, fleet::TenancyDeletion> ||
                        std::is_same_v<T, fleet::ContainerDeletion> ||
                        std::is_same_v<T, fleet::TokenDeletion>)
            keep.deletions.push_back(value);
        },
        mutation);
  }
  store.Commit(std::move(mutations),
               [this, keep = std::move(keep), done = std::move(done)](Status status) mutable {
                 // Runs on the store's writer thread; the lock only on failure (nothing waits
                 // for the writer while holding it).
                 if (!status) {
                   std::lock_guard lock(mu);
                   unsaved.containers.merge(keep.containers);
                   unsaved.gpus.merge(keep.gpus);
                   unsaved.tenancies.merge(keep.tenancies);
                   unsaved.tokens.merge(keep.tokens);
                   for (auto& deletion : keep.deletions)
                     unsaved.deletions.push_back(std::move(deletion));
                   for (auto& usage : keep.usage)
                     unsaved.usage.push_back(std::move(usage));
                   for (auto& audit : keep.audit)
                     unsaved.audit.push_back(std::move(audit));
                   unsaved.cursors = unsaved.cursors || keep.cursors;
                   scheduler_wake.notify_one();
                 }
                 if (done) done(status);
               });
}

void Model::RetryUnsaved() {
  if (unsaved.empty()) {
    // Nothing kept, yet the store may still fail: a barrier then tries a write of its own.
    if (store.WriteFailure()) store.Commit({}, nullptr);
    return;
  }
  Unsaved retry = std::move(unsaved);
  unsaved = Unsaved{};
  std::vector<Mutation> mutations;
  for (const auto& name : retry.tenancies)
    if (auto it = tenancies.find(name); it != tenancies.end()) mutations.push_back(it->second);
  for (const auto& sha256 : retry.tokens)
    if (auto it = tokens.find(sha256); it != tokens.end()) mutations.push_back(it->second);
  for (const auto& id : retry.gpus)
    if (auto* gpu = FindGpu(id)) mutations.push_back(*gpu);
  for (const auto& id : retry.containers)
    if (auto it = containers.find(id); it != containers.end()) mutations.push_back(it->second);
  for (auto& deletion : retry.deletions) {
    // A name deleted and created again since: the deletion is history, the new record stays.
    if (const auto* d = std::get_if<fleet::TenancyDeletion>(&deletion);
        d && tenancies.count(d->name))
      continue;
    mutations.push_back(std::move(deletion));
  }
  for (auto& usage : retry.usage)
    mutations.push_back(std::move(usage));
  for (auto& audit : retry.audit)
    mutations.push_back(std::move(audit));
  if (retry.cursors)
    for (const auto& [gpu, cursor] : telemetry_cursors)
      mutations.push_back(cursor);
  spdlog::info("store: writing again {} records it could not write before", mutations.size());
  Commit(std::move(mutations), nullptr);
}

bool Model::UsageUnsaved(const std::string& container_id) const {
  return std::any_of(
      unsaved.usage.begin(), unsaved.usage.end(),
      [&](const fleet::UsageRecord& usage) { return usage.container_id == container_id; });
}

void Model::WriteLeaseFile() {
  lease_dirty_ = false;
  if (options.lease_file.empty()) return;
  // Format shared with the device plugin, which reports checking/quarantined/draining GPUs as
  // Unhealthy: {"version":1,"gpus":{"<PCI address>":{"state","reason","tenancy"}}}. Version 1
  // knows no faulted state (its readers refuse the file over an unknown one): a faulted GPU is
  // written as quarantined, with the fault as its reason.
  nlohmann::json doc = {{"version", 1}, {"gpus", nlohmann::json::object()}};
  for (const auto& gpu : gpus) {
    if (!gpu.node.empty()) continue;  // other nodes' lease files are written by their agents
    const LeaseState written =
        gpu.state == LeaseState::kFaulted ? LeaseState::kQuarantined : gpu.state;
    doc["gpus"][gpu.pci_address] = {{"state", fleet::LeaseStateName(written)},
                                    {"reason", gpu.reason},
                                    {"tenancy", gpu.tenancy}};
  }
  std::string text = doc.dump(2) + "\n";
  if (text == lease_file_written_) return;
  std::error_code error;
  std::filesystem::create_directories(std::filesystem::path(options.lease_file).parent_path(),
                                      error);
  if (auto status = WriteFileAtomically(options.lease_file, text, 0644); !status) {
    spdlog::error("lease file: {}", status.error().message);
    lease_dirty_ = true;
    return;
  }
  lease_file_written_ = std::move(text);
}

void Model::OnExit(const std::string& id, const backends::ExitInfo& info) {
  {
    std::lock_guard lock(mu);
    exits.push_back(ExitEvent{id, info});
  }
  scheduler_wake.notify_one();
}

}  // namespace tessera::serve

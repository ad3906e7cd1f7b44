#include "serve/service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <set>

#include "firmware/firmware.h"
#include "serve/queue.h"
#include "serve/record_names.h"

namespace tessera::serve {

Service::Service(ServiceOptions options, std::unique_ptr<fleet::Store> store,
                 std::unique_ptr<backends::ContainerBackend> backend)
    : options_(std::move(options)),
      store_(std::move(store)),
      backend_(std::move(backend)),
      model_(options_, *store_),
      gpus_(model_),
      access_(model_),
      limits_(model_),
      tenancies_(model_, *backend_),
      submissions_(model_, gpus_, *backend_),
      shared_(model_, options_.sharing),
      scheduler_(model_, *backend_, shared_),
      checker_(model_, *backend_, shared_),
      replica_sync_(model_),
      measurement_(model_, *backend_),
      readiness_(model_, *backend_),
      faults_(model_, submissions_, fault_metrics_),
      recovery_(model_, faults_) {
  gpus_.SetFaults(&faults_);
  if (options_.mig_shaper && !options_.fleet)
    mig_demand_ = std::make_unique<MigDemand>(model_, options_.mig_shaper);
  model_.firmware_checked = [this](GpuRecord& gpu, bool passed, const std::string& reason,
                                   std::vector<Mutation>& out) {
    return faults_.FirmwareCheckedLocked(gpu, passed, reason, out);
  };
}

Service::~Service() {
  Stop();
  // Commits still queued run callbacks that reach the model (a submission joining the queue, a
  // write kept to retry): they run before the parts go. Twice: a callback may queue one more.
  if (store_) {
    (void)store_->CommitAndWait({});
    (void)store_->CommitAndWait({});
  }
}

Result<std::unique_ptr<Service>> Service::Create(
    ServiceOptions options, Host host, std::unique_ptr<fleet::Store> store,
    std::unique_ptr<backends::ContainerBackend> backend) {
  std::optional<topology::GpuChooser> chooser;
  if (host.topology && !host.topology->gpus.empty()) {
    auto created = topology::GpuChooser::Create(*host.topology, options.partition_table);
    if (!created) return created.error().WithContext("placement");
    chooser = std::move(*created);
  } else if (options.partition_table) {
    return InvalidArgument("--partition-table: the host has no GPUs to partition");
  }
  options.scheduling.placement = options.policy;
  auto queue = scheduling::Scheduler::Create(options.scheduling);
  if (!queue) return queue.error().WithContext("scheduling");
  std::unique_ptr<Service> service(
      new Service(std::move(options), std::move(store), std::move(backend)));
  service->model_.queue = std::move(*queue);
  service->model_.chooser = std::move(chooser);
  if (auto status = service->Load(std::move(host)); !status) return status.error();
  // With a shared store only the leader reconciles, when it starts leading.
  if (!service->options_.resync) service->Reconcile();
  service->measurement_.Open();
  // The shares' watchdog takes its own readings, attributed as telemetry attributes: with
  // telemetry on, time-sliced shares are held by it (enforcement `watchdog`), and MPS shares
  // past their limit.
  if (service->measurement_.enabled() && !service->options_.sharing.measure) {
    Measurement* measurement = &service->measurement_;
    service->options_.sharing.measure = [measurement] {
      return measurement->SampleShareProcesses();
    };
  }
  return service;
}

// ---------------------------------------------------------------------------------------------
// Start-up: load, merge the host's GPUs, reconcile with the backend.

Status Service::Load(Host host) {
  auto snapshot = model_.store.Load();
  if (!snapshot) return snapshot.error();
  std::lock_guard lock(model_.mu);
  const std::set<std::string> incarnations = LoadTenanciesLocked(*snapshot);
  // The latest moment the service is known to have run: what it last wrote. A container that
  // vanished while it was down is billed no further than that.
  last_alive_ms_ = 0;
  LoadUsageLocked(*snapshot);
  LoadContainersLocked(snapshot->containers, incarnations);
  std::vector<Mutation> mutations;
  if (auto status = MergeHostGpusLocked(*snapshot, host.gpus, mutations); !status) return status;
  AttachMigHoldersLocked();
  AttachShareHoldersLocked();
  if (auto status = model_.store.CommitAndWait(std::move(mutations)); !status) return status;
  return Ok();
}

void Service::SeenAlive(int64_t ms) {
  last_alive_ms_ = std::max(last_alive_ms_, ms);
}

std::set<std::string> Service::LoadTenanciesLocked(fleet::StoreSnapshot& snapshot) {
  std::set<std::string> incarnations;  // of the tenancies that exist
  for (auto& tenancy : snapshot.tenancies) {
    incarnations.insert(tenancy.uid);
    (void)model_.queue->SetTenancy(tenancy.uid, PolicyOf(tenancy));
    model_.tenancies[tenancy.name] = std::move(tenancy);
  }
  for (auto& token : snapshot.tokens)
    model_.tokens[token.sha256] = std::move(token);
  for (auto& id : snapshot.retired_ids)
    model_.retired_ids.insert(std::move(id));
  return incarnations;
}

void Service::LoadUsageLocked(fleet::StoreSnapshot& snapshot) {
  // Recent usage (fair share) is rebuilt from the bills: the queue's time starts now.
  model_.queue->Advance(static_cast<double>(fleet::NowMs()) / 1000.0);
  for (const auto& usage : snapshot.usage) {
    SeenAlive(usage.finished_ms);
    model_.queue->ChargePast(
        usage.tenancy_uid.empty() ? "name:" + usage.tenancy : usage.tenancy_uid, usage.gpus,
        static_cast<double>(usage.started_ms) / 1000.0,
        static_cast<double>(usage.finished_ms) / 1000.0);
  }
  model_.meter.Load(std::move(snapshot.usage));
  measurement_.Seed(snapshot.cursors);
}

void Service::LoadContainersLocked(std::vector<ContainerRecord>& containers,
                                   const std::set<std::string>& incarnations) {
  for (auto& container : containers) {
    SeenAlive(std::max({container.created_ms, container.started_ms, container.finished_ms}));
    if (container.state == ContainerState::kPending && !container.started) {
      if (container.spec.gpus > 0) {
        if (auto queued = model_.queue->Enqueue(PendingRequestOf(container)); !queued)
          spdlog::error("container {}: {}", container.id, queued.error().message);
      } else if (container.spec.mig.count > 0) {
        model_.EnqueueMig(container);
      } else if (container.spec.share) {
        model_.EnqueueShare(container);
      } else {
        model_.pending.push_back(container.id);
      }
    }
    if (container.state == ContainerState::kRunning) model_.MeterStarted(container);
    // A deleted incarnation's keys went with it.
    const bool keyed = !container.idempotency_key.empty() && !container.tenancy_uid.empty() &&
                       incarnations.count(container.tenancy_uid);
    const std::string key = container.tenancy_uid + '\n' + container.idempotency_key;
    const std::string id = container.id;
    model_.AddContainer(std::move(container));
    if (!keyed) {
      auto it = model_.idempotency.find(key);
      if (it != model_.idempotency.end() && it->second == id) model_.idempotency.erase(it);
    }
  }
}

Status Service::MergeHostGpusLocked(fleet::StoreSnapshot& snapshot,
                                    std::vector<GpuRecord>& host_gpus,
                                    std::vector<Mutation>& mutations) {
  std::map<std::string, GpuRecord> stored;  // by ID
  for (auto& gpu : snapshot.gpus) {
    SeenAlive(gpu.updated_ms);
    std::string key = gpu.id();
    stored.emplace(std::move(key), std::move(gpu));
  }
  for (auto& gpu : host_gpus) {
    auto it = stored.find(gpu.id());
    if (it != stored.end()) {
      GpuRecord merged = it->second;
      merged.index = gpu.index;
      merged.model = gpu.model;
      merged.cdi_device = gpu.cdi_device;
      merged.mig_enabled = gpu.mig_enabled;
      merged.compute_slices = gpu.compute_slices;
      merged.mig_slices = gpu.mig_slices;
      merged.memory_bytes = gpu.memory_bytes;
      merged.uuid = gpu.uuid;
      model_.gpus.push_back(std::move(merged));
    } else if (auto baseline = snapshot.firmware_baselines.find(gpu.id());
               baseline != snapshot.firmware_baselines.end()) {
      return MissingLeaseRecord(gpu, baseline->second);
    } else {
      AddNewHostGpuLocked(gpu);
    }
    mutations.push_back(model_.gpus.back());
  }
  for (auto& [id, gpu] : stored) {
    if (model_.FindGpu(id)) continue;
    if (model_.options.fleet && !gpu.node.empty()) {
      // Its node has not published it yet: kept, with its lease, but not placed until it does.
      gpu.available = false;
      model_.gpus.push_back(std::move(gpu));
      continue;
    }
    spdlog::warn("GPU {} is in the store but not on the host", id);
  }
  return Ok();
}

Error Service::MissingLeaseRecord(const GpuRecord& gpu, const std::string& baseline) {
  // Its baseline is in the store but its lease record is not: the store lost the record.
  // Recording its ROM now as a baseline would accept whatever firmware it has now.
  return FailedPrecondition(
      "store: GPU " + gpu.id() + " has a firmware baseline (" + baseline +
      ") but no lease record: rows are missing from the store, and it is not served. "
      "Restore a backup of the store, or, once the GPU's firmware is known to be good, "
      "delete its baseline row (sqlite3 tessera.db \"DELETE FROM firmware_baselines WHERE "
      "pci_address = '" +
      gpu.pci_address + "'\") to have it recorded again");
}

void Service::AddNewHostGpuLocked(GpuRecord& gpu) {
  // First sight of this GPU: its option ROM now is the baseline later checks compare with.
  auto digest = firmware::HashOptionRom(model_.options.root, gpu.pci_address);
  gpu.state = LeaseState::kFree;
  if (digest) {
    gpu.firmware_baseline = *digest;
  } else {
    gpu.state = LeaseState::kQuarantined;
    gpu.reason = "no firmware baseline: " + digest.error().message;
  }
  gpu.updated_ms = fleet::NowMs();
  model_.gpus.push_back(gpu);
}

void Service::AttachMigHoldersLocked() {
  // Who holds a slice is what the container records say: a started MIG container that has not
  // ended holds the MIG devices it names.
  for (const auto& id : model_.container_order) {
    const ContainerRecord& container = model_.containers.at(id);
    if (container.spec.mig.count == 0 || !container.started || fleet::IsTerminal(container.state) ||
        container.mig_devices.empty())
      continue;
    // Counted in its tenancy's share and GPU quota until it ends, and what it ran before this
    // start of the service in its recent usage.
    model_.AddMigUse(QueueTenancy(container), container.mig_gpus);
    if (container.started_ms > 0)
      model_.queue->ChargePast(QueueTenancy(container), container.mig_gpus,
                               static_cast<double>(container.started_ms) / 1000.0,
                               static_cast<double>(fleet::NowMs()) / 1000.0);
    for (const auto& device : container.mig_devices) {
      bool found = false;
      for (const auto& gpu_id : container.gpus) {
        GpuRecord* gpu = model_.FindGpu(gpu_id);
        if (!gpu) continue;
        for (auto& slice : gpu->mig_slices) {
          if (slice.id != device) continue;
          slice.container_id = container.id;
          slice.tenancy = container.spec.tenancy;
          found = true;
        }
      }
      // Its parent's lease (still naming the container) is released with the container.
      if (!found)
        spdlog::warn("container {}: MIG device {} is no longer in the host's layout", id, device);
    }
  }
}

void Service::AttachSliceShareLocked(GpuRecord& gpu, const ContainerRecord& container) {
  const std::string device = container.mig_devices.empty() ? "" : container.mig_devices.front();
  // Held (and counted) until it ends, as every share.
  gpu.shares.push_back(
      {container.id, container.spec.tenancy, container.tenancy_uid, *container.spec.share, device});
  for (auto& slice : gpu.mig_slices) {
    if (slice.id != device) continue;
    slice.shared = true;
    if (slice.container_id.empty()) {
      slice.container_id = container.id;
      slice.tenancy = container.spec.tenancy;
    }
    return;
  }
  // Its parent's lease (still naming the container) is released with the container.
  spdlog::warn("container {}: MIG device {} of its share is no longer in the host's layout",
               container.id, device);
}

void Service::AttachShareHoldersLocked() {
  // Per (GPU, tenancy incarnation): its running share containers, and those that ended.
  using HoldKey = std::pair<std::string, std::string>;
  std::map<HoldKey, std::vector<const ContainerRecord*>> running, ended;
  std::map<HoldKey, std::string> names;
  // A started share container that has not ended holds a share of the GPU it names.
  for (const auto& id : model_.container_order) {
    const ContainerRecord& container = model_.containers.at(id);
    if (!container.spec.share || !container.started || container.gpus.size() != 1) continue;
    const HoldKey hold{container.gpus.front(), container.tenancy_uid};
    if (fleet::IsTerminal(container.state)) {
      if (container.started_ms > 0) ended[hold].push_back(&container);
      continue;
    }
    GpuRecord* gpu = model_.FindGpu(container.gpus.front());
    if (!gpu) {
      spdlog::warn("container {}: its shared GPU {} is no longer on the host", id,
                   container.gpus.front());
      continue;
    }
    // Counted in its tenancy's share and GPU quota until it ends (the whole GPU with the first
    // of its tenancy there, where the GPU takes no other tenancy's), and what it ran before this
    // start of the service in its recent usage.
    const bool holds =
        std::any_of(gpu->shares.begin(), gpu->shares.end(), [&](const fleet::ShareHolder& holder) {
          return holder.tenancy_uid == container.tenancy_uid;
        });
    const double use =
        model_.share_holds.UseJoining(*container.spec.share, holds, container.share_gpus);
    model_.AddMigUse(QueueTenancy(container), use);
    if (container.started_ms > 0 && use > 0)
      model_.queue->ChargePast(QueueTenancy(container), use,
                               static_cast<double>(container.started_ms) / 1000.0,
                               static_cast<double>(fleet::NowMs()) / 1000.0);
    if (!container.spec.share->mig_profile.empty()) {
      // A share of a MIG slice holds the slice it names, and pays its part only (no hold).
      AttachSliceShareLocked(*gpu, container);
      continue;
    }
    gpu->shares.push_back(
        {container.id, container.spec.tenancy, container.tenancy_uid, *container.spec.share, ""});
    names[hold] = container.spec.tenancy;
    if (container.state == ContainerState::kRunning) running[hold].push_back(&container);
  }
  // Their GPUs' bills go on from the last change of their running shares.
  for (const auto& [hold, name] : names)
    if (const GpuRecord* gpu = model_.FindGpu(hold.first))
      model_.share_holds.Adopt(*gpu, hold.second, name, running[hold], ended[hold], model_.meter);
}

void Service::Reconcile() {
  std::map<std::string, backends::BackendContainer> present;
  const bool listed = ListBackendContainers(present);
  InspectEndedWhileDown(present);
  std::vector<std::pair<std::string, bool>> to_watch;
  std::vector<std::string> orphans;
  {
    std::lock_guard lock(model_.mu);
    std::vector<Mutation> mutations;
    for (const auto& id : model_.container_order) {
      auto& container = model_.containers.at(id);
      if (fleet::IsTerminal(container.state) || !container.started) continue;
      if (!listed) {
        to_watch.emplace_back(id, true);
        continue;
      }
      ReconcileContainerLocked(container, present, to_watch, mutations);
    }
    for (const auto& [id, container] : present) {
      auto known = model_.containers.find(id);
      // Unknown: started by a submission that was never acknowledged. Known but not started:
      // its start was under way when the service died, and its `started` mark was not yet
      // durable; it is placed and started afresh, so this copy must go.
      if (known == model_.containers.end() || !known->second.started) orphans.push_back(id);
    }
    ReleaseStaleLeasesLocked(mutations);
    model_.reschedule = true;
    model_.Commit(std::move(mutations), nullptr);
  }
  (void)model_.store.CommitAndWait({});
  WatchReconciled(to_watch);
  for (const auto& id : orphans) {
    spdlog::warn("reconcile: removing container {} that the store does not hold as running", id);
    (void)backend_->Remove(id);
  }
}

bool Service::ListBackendContainers(std::map<std::string, backends::BackendContainer>& present) {
  auto listed = backend_->List();
  if (!listed) {
    spdlog::warn("reconcile: backend {} cannot list containers: {}", backend_->name(),
                 listed.error().message);
    return false;
  }
  for (auto& container : *listed) {
    std::string id = container.id;
    present.emplace(std::move(id), std::move(container));
  }
  return true;
}

void Service::InspectEndedWhileDown(std::map<std::string, backends::BackendContainer>& present) {
  // Those that ended while the service was down: their runtime's own record of when (the list
  // may give whole seconds only). Asked without the lock.
  std::vector<std::string> ended_while_down;
  {
    std::lock_guard lock(model_.mu);
    for (const auto& [id, container] : present) {
      auto known = model_.containers.find(id);
      if (container.state == backends::BackendState::kExited && known != model_.containers.end() &&
          known->second.started && !fleet::IsTerminal(known->second.state))
        ended_while_down.push_back(id);
    }
  }
  for (const auto& id : ended_while_down) {
    auto inspected = backend_->Inspect(id);
    if (!inspected) {
      spdlog::warn("reconcile: {}: {}", id, inspected.error().message);
      continue;
    }
    spdlog::info("reconcile: container {} ended while the service was down ({}, at {} ms)", id,
                 backends::BackendStateName(inspected->state), inspected->finished_ms);
    if (inspected->state != backends::BackendState::kExited) continue;
    auto& container = present[id];
    if (inspected->finished_ms > 0) container.finished_ms = inspected->finished_ms;
    if (inspected->started_ms > 0) container.started_ms = inspected->started_ms;
    container.never_started = inspected->never_started;
  }
}

void Service::ReconcileContainerLocked(
    ContainerRecord& container, const std::map<std::string, backends::BackendContainer>& present,
    std::vector<std::pair<std::string, bool>>& to_watch, std::vector<Mutation>& mutations) {
  const std::string& id = container.id;
  auto it = present.find(id);
  if (it == present.end()) {
    // Nobody can say when it ended: billed no further than the service is known to have
    // run, never for the time it was down.
    backends::ExitInfo info{
        std::nullopt, true,
        "vanished from backend " + backend_->name() + " while the service was down"};
    info.finished_ms = std::max(last_alive_ms_, container.started_ms);
    model_.FinishContainer(container, info, mutations);
  } else if (it->second.state == backends::BackendState::kExited) {
    // It ended while the service was down: billed to the end its runtime reports.
    backends::ExitInfo info{it->second.exit_code, false, ""};
    info.finished_ms = it->second.finished_ms;
    info.never_started = it->second.never_started;
    model_.FinishContainer(container, info, mutations);
  } else {
    if (container.state == ContainerState::kPending) {
      model_.SetContainerState(container, ContainerState::kRunning);
      // Its start was under way when the service died: it runs from now on as far as
      // anyone can tell (metering and duration limits count from here).
      if (!container.started_ms) container.started_ms = fleet::NowMs();
      model_.MeterStarted(container);
      model_.ShareStarted(container, mutations);
      for (const auto& pci : container.gpus)
        if (auto* gpu = model_.FindGpu(pci); gpu && gpu->state == LeaseState::kReserved)
          model_.SetGpuState(*gpu, LeaseState::kActive, "", mutations);
      mutations.push_back(container);
    }
    // Created but not started: the service died while podman was starting it.
    to_watch.emplace_back(id, it->second.state != backends::BackendState::kCreated);
  }
}

void Service::ReleaseStaleLeasesLocked(std::vector<Mutation>& mutations) {
  // GPUs whose lease outlived its container, or whose check was cut short.
  for (auto& gpu : model_.gpus) {
    if (!gpu.leased()) continue;
    auto it = model_.containers.find(gpu.container_id);
    bool holder_done = it == model_.containers.end() || fleet::IsTerminal(it->second.state);
    // In MIG mode the lease lasts while any slice is held; a shared GPU's while any share is.
    if (gpu.mig_enabled && gpu.HasMigHolders()) holder_done = false;
    if (!gpu.shares.empty()) holder_done = false;
    if ((gpu.state == LeaseState::kReserved || gpu.state == LeaseState::kActive) && holder_done) {
      model_.SetGpuState(gpu, LeaseState::kReleasing, "", mutations);
    }
    if (gpu.state == LeaseState::kReleasing || gpu.state == LeaseState::kChecking)
      model_.to_check.push_back(gpu.id());
  }
}

void Service::WatchReconciled(const std::vector<std::pair<std::string, bool>>& to_watch) {
  for (const auto& [id, started] : to_watch) {
    auto on_exit = [this](const std::string& cid, const backends::ExitInfo& info) {
      model_.OnExit(cid, info);
    };
    auto status = started ? backend_->Watch(id, on_exit) : backend_->Resume(id, on_exit);
    if (!status) {
      backends::ExitInfo info{std::nullopt, true, status.error().message};
      info.never_started = !started;  // a created container that could not be started
      model_.OnExit(id, info);
    }
  }
}

void Service::Start() {
  StartLeading();
  measurement_.Start();
  readiness_.Start();
}

void Service::StartLeading() {
  if (options_.resync) {
    // What the previous leader wrote last is read again, then the backend's containers are
    // matched against it, before anything is placed.
    if (auto status = options_.resync(); !status)
      spdlog::warn("taking the lead: resync: {}", status.error().message);
    Reconcile();
  }
  scheduler_.Start();
  checker_.Start();
  shared_.Start();
  recovery_.Start();
  if (mig_demand_) mig_demand_->Start();
}

void Service::StopLeading() {
  if (mig_demand_) mig_demand_->Stop();
  recovery_.Stop();
  scheduler_.Stop();
  checker_.Stop();
  shared_.Stop();
}

void Service::SetLeadershipCheck(std::function<bool()> is_leader) {
  replica_sync_.SetLeadershipCheck(is_leader);
  scheduler_.SetPlacementGuard(std::move(is_leader));
}

void Service::ApplyReplicated(const fleet::Mutation& change) {
  replica_sync_.Apply(change);
}

void Service::Stop() {
  readiness_.Stop();
  measurement_.Stop();
  StopLeading();
}

// ---------------------------------------------------------------------------------------------
// The API, part by part.

void Service::UpdateNodes(std::vector<NodeInventory> nodes) {
  gpus_.UpdateNodes(std::move(nodes));
}

void Service::SetAdminTokenHash(std::string sha256) {
  access_.SetAdminTokenHash(std::move(sha256));
}

Result<Caller> Service::Authenticate(std::string_view token) {
  return access_.Authenticate(token);
}

Status Service::CheckReserve() const {
  // Running containers only: a pending one has no log yet, and counting a queue of them would let
  // one tenancy's waiting requests refuse everyone's work.
  int64_t running;
  {
    std::lock_guard lock(model_.mu);
    running = model_.container_counts[static_cast<int>(fleet::ContainerState::kRunning)];
  }
  return CheckStoreReserve(options_.data_dir, options_.store_reserve, running);
}

void Service::RecordRefusal(const Caller& caller, AuditSubject subject, std::string result,
                            std::function<void()> then) {
  // A store that cannot write records nothing, refusals included; the refusal (503 with the
  // reason) is answered at once rather than queued behind writes that fail.
  if (auto failure = store_->WriteFailure()) {
    spdlog::debug("audit: a refused request's record is not written: {}", *failure);
    if (then) then();
    return;
  }
  store_->Commit({AuditOf(caller, std::move(subject), std::move(result))},
                 [then = std::move(then)](Status status) {
                   if (!status)
                     spdlog::warn("audit: a refused request's record: {}", status.error().message);
                   if (then) then();
                 });
}

Result<fleet::AuditPage> Service::Audit(const Caller& caller,
                                        const fleet::AuditQuery& query) const {
  if (!caller.admin) return PermissionDenied("only the admin token reads the audit trail");
  return store_->QueryAudit(query);
}

void Service::CreateToken(const Caller& caller, const std::string& tenancy,
                          const TokenRequest& request, Done<CreatedToken> done) {
  if (auto status = CheckReserve(); !status) return done(status.error());
  access_.CreateToken(caller, tenancy, request, std::move(done));
}

Result<std::vector<fleet::TokenRecord>> Service::ListTokens(const Caller& caller,
                                                            const std::string& tenancy) const {
  return access_.ListTokens(caller, tenancy);
}

void Service::RevokeToken(const Caller& caller, const std::string& id,
                          Done<fleet::TokenRecord> done) {
  access_.RevokeToken(caller, id,
                      [this, done = std::move(done)](Result<fleet::TokenRecord> result) {
                        if (result) limits_.Forget(result->id);
                        done(std::move(result));
                      });
}

Result<std::string> Service::RotateAdminToken(const Caller& caller) {
  return access_.RotateAdminToken(caller, options_.admin_token_file);
}

RateLimit Service::RateLimitFor(const fleet::Tenancy& tenancy) {
  return limits_.LimitFor(
      Caller{false, tenancy.name, tenancy.uid, "", fleet::TokenScope::kTenant, ""});
}

void Service::PutTenancy(const Caller& caller, fleet::Tenancy tenancy, Done<fleet::Tenancy> done) {
  if (auto status = CheckReserve(); !status) return done(status.error());
  tenancies_.Put(caller, std::move(tenancy), std::move(done));
}

Result<fleet::Tenancy> Service::GetTenancy(const Caller& caller, const std::string& name) const {
  return tenancies_.Get(caller, name);
}

std::vector<fleet::Tenancy> Service::ListTenancies(const Caller& caller) const {
  return tenancies_.List(caller);
}

void Service::PutStorage(const Caller& caller, const std::string& tenancy,
                         tenancy::StorageEntitlements storage,
                         Done<tenancy::StorageEntitlements> done) {
  if (auto status = CheckReserve(); !status) return done(status.error());
  tenancies_.PutStorage(caller, tenancy, std::move(storage), std::move(done));
}

Result<tenancy::StorageEntitlements> Service::GetStorage(const Caller& caller,
                                                         const std::string& tenancy) const {
  return tenancies_.GetStorage(caller, tenancy);
}

Result<UsageReport> Service::Usage(const Caller& caller, const std::string& tenancy,
                                   const UsageQuery& query) const {
  return tenancies_.Usage(caller, tenancy, query);
}

Status Service::PrepareTenancy(const std::string& tenancy) {
  return tenancies_.Prepare(tenancy);
}

Status Service::DeleteTenancy(const Caller& caller, const std::string& tenancy) {
  return tenancies_.Delete(caller, tenancy);
}

void Service::Submit(const Caller& caller, fleet::ContainerSpec spec, std::string idempotency_key,
                     Done<SubmitResult> done) {
  if (auto status = CheckReserve(); !status) return done(status.error());
  submissions_.Submit(caller, std::move(spec), std::move(idempotency_key), std::move(done));
}

Result<fleet::ContainerRecord> Service::GetContainer(const Caller& caller,
                                                     const std::string& id) const {
  return submissions_.Get(caller, id);
}

Result<ContainerPage> Service::ListContainers(const Caller& caller,
                                              const ContainerQuery& query) const {
  return submissions_.List(caller, query);
}

void Service::DeleteContainer(const Caller& caller, const std::string& id,
                              Done<fleet::ContainerRecord> done) {
  submissions_.Delete(caller, id, std::move(done));
}

Result<backends::LogPart> Service::LogsFrom(const Caller& caller, const std::string& id,
                                            uint64_t offset) {
  return submissions_.LogsFrom(caller, id, offset);
}

QueueView Service::Queue(const Caller& caller) const {
  return submissions_.Queue(caller);
}

std::vector<GpuRecord> Service::ListGpus(const Caller& caller) const {
  return gpus_.List(caller);
}

Result<GpuRecord> Service::GetGpu(const Caller& caller, const std::string& gpu_id) const {
  return gpus_.Get(caller, gpu_id);
}

void Service::GpuAdmin(const Caller& caller, const std::string& gpu_id, GpuAction action,
                       std::string reason, Done<GpuRecord> done) {
  gpus_.Admin(caller, gpu_id, action, std::move(reason), std::move(done));
}

std::string Service::ExtraMetrics() const {
  std::string out = options_.extra_metrics ? options_.extra_metrics() : std::string();
  // A client holds its daemon's control socket: what it moved, and the service put back.
  out +=
      "# HELP tessera_mps_limits_restored_total MPS daemon limits changed from outside and "
      "restored\n# TYPE tessera_mps_limits_restored_total counter\n"
      "tessera_mps_limits_restored_total " +
      std::to_string(shared_.limits_restored()) + "\n";
  return out;
}

DashboardView Service::Dashboard(const Caller& caller) const {
  auto gauges = measurement_.gauges();
  if (options_.fleet) {
    // The nodes' GPUs: what their agents measured, as the backend last read it.
    auto fleet_gauges = std::make_shared<Gauges>();
    for (const auto& [id, reading] : backend_->GpuGauges()) {
      GpuGauges& g = fleet_gauges->gpus[id];
      g.util_percent = reading.util_percent;
      g.memory_used = reading.memory_used;
      g.memory_total = reading.memory_total;
      g.power_watts = reading.power_watts;
      fleet_gauges->time_ms = std::max(fleet_gauges->time_ms, reading.time_ms);
    }
    gauges = std::move(fleet_gauges);
  }
  std::lock_guard lock(model_.mu);
  return BuildDashboardLocked(model_, caller, gauges.get());
}

Counts Service::counts() const {
  Counts counts;
  counts.store = model_.store.stats();
  counts.store_write_failure = model_.store.WriteFailure();
  std::vector<std::pair<std::string, std::string>> tenancies;  // name, uid
  {
    std::lock_guard lock(model_.mu);
    for (const auto& gpu : model_.gpus)
      counts.gpus[static_cast<int>(gpu.state)]++;
    counts.containers = model_.container_counts;
    counts.scheduling_passes = model_.passes;
    counts.queue_reports = model_.reports;
    for (const auto& [name, tenancy] : model_.tenancies)
      tenancies.emplace_back(name, tenancy.uid);
  }
  // Series of the tenancies that exist, each its current incarnation's: a name created again
  // starts from nothing, and an ended incarnation's series are gone.
  const int64_t now_ms = fleet::NowMs();
  for (const auto& [name, uid] : tenancies) {
    Counts::Tenancy tenancy;
    tenancy.name = name;
    tenancy.uid = uid;
    tenancy.gpu_seconds = model_.meter.TotalGpuMs(uid, now_ms) / 1000.0;
    if (auto histogram = model_.meter.WaitsOf(uid)) {
      Counts::Waits waits;
      waits.bounds.assign(WaitHistogram::kBounds.begin(), WaitHistogram::kBounds.end());
      uint64_t cumulative = 0;
      for (uint64_t bucket : histogram->buckets)
        waits.cumulative.push_back(cumulative += bucket);
      waits.count = histogram->count;
      waits.sum = histogram->sum;
      tenancy.queue_waits = std::move(waits);
    }
    counts.tenancies.push_back(std::move(tenancy));
  }
  return counts;
}

std::optional<std::string> Service::StoreWriteFailure() const {
  return model_.store.WriteFailure();
}

scheduling::TenancyPolicy Service::PolicyFor(const fleet::Tenancy& tenancy) const {
  std::lock_guard lock(model_.mu);
  auto policy = model_.queue->GetTenancy(tenancy.uid);
  policy.quota_pending = model_.queue->PendingQuotaOf(tenancy.uid);
  return policy;
}

bool Service::WaitIdle(std::chrono::milliseconds timeout) {
  std::unique_lock lock(model_.mu);
  return model_.idle.wait_for(lock, timeout, [this] {
    bool running = false;
    for (const auto& gpu : model_.gpus)
      running = running || gpu.leased();
    return model_.pending.empty() && model_.mig_pending.empty() && model_.share_pending.empty() &&
           model_.queue->pending_count() == 0 && model_.exits.empty() && model_.to_check.empty() &&
           model_.busy == 0 && !running;
  });
}

}  // namespace tessera::serve

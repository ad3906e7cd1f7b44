#include "serve/service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/thread_pool.hpp>
#include <filesystem>
#include <future>
#include <nlohmann/json.hpp>
#include <set>

#include "common/atomic_file.h"
#include "firmware/firmware.h"
#include "process/process.h"

namespace tessera::serve {

using fleet::ContainerRecord;
using fleet::ContainerState;
using fleet::GpuRecord;
using fleet::LeaseState;
using fleet::Mutation;

tenancy::StorageEntitlements Service::StorageOf(const fleet::Tenancy& record) {
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

Result<GpuAction> ParseGpuAction(std::string_view name) {
  if (name == "drain") return GpuAction::kDrain;
  if (name == "undrain") return GpuAction::kUndrain;
  if (name == "quarantine") return GpuAction::kQuarantine;
  if (name == "release") return GpuAction::kRelease;
  return NotFound("GPU action \"" + std::string(name) +
                  "\" is unknown (drain, undrain, quarantine, release)");
}

Service::Service(ServiceOptions options, std::unique_ptr<fleet::Store> store,
                 std::unique_ptr<backends::ContainerBackend> backend)
    : options_(std::move(options)), store_(std::move(store)), backend_(std::move(backend)) {}

Service::~Service() {
  Stop();
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
  std::unique_ptr<Service> service(
      new Service(std::move(options), std::move(store), std::move(backend)));
  service->chooser_ = std::move(chooser);
  if (auto status = service->Load(std::move(host)); !status) return status.error();
  service->Reconcile();
  return service;
}

// ---------------------------------------------------------------------------------------------
// Start-up: load, merge the host's GPUs, reconcile with the backend.

Status Service::Load(Host host) {
  auto snapshot = store_->Load();
  if (!snapshot) return snapshot.error();
  std::lock_guard lock(mu_);
  std::set<std::string> incarnations;  // of the tenancies that exist
  for (auto& tenancy : snapshot->tenancies) {
    incarnations.insert(tenancy.uid);
    tenancies_[tenancy.name] = std::move(tenancy);
  }
  for (auto& token : snapshot->tokens)
    tokens_[token.sha256] = std::move(token);
  for (auto& container : snapshot->containers) {
    container_counts_[static_cast<int>(container.state)]++;
    // A deleted incarnation's keys went with it.
    if (!container.idempotency_key.empty() && !container.tenancy_uid.empty() &&
        incarnations.count(container.tenancy_uid))
      idempotency_[container.tenancy_uid + '\n' + container.idempotency_key] = container.id;
    if (container.state == ContainerState::kPending && !container.started)
      pending_.push_back(container.id);
    container_position_[container.id] = container_order_.size();
    container_order_.push_back(container.id);
    std::string id = container.id;
    containers_.emplace(std::move(id), std::move(container));
  }
  std::map<std::string, GpuRecord> stored;  // by ID
  for (auto& gpu : snapshot->gpus) {
    std::string key = gpu.id();
    stored.emplace(std::move(key), std::move(gpu));
  }
  std::vector<Mutation> mutations;
  for (auto& gpu : host.gpus) {
    auto it = stored.find(gpu.id());
    if (it != stored.end()) {
      GpuRecord merged = it->second;
      merged.index = gpu.index;
      merged.model = gpu.model;
      merged.cdi_device = gpu.cdi_device;
      gpus_.push_back(std::move(merged));
    } else {
      // First sight of this GPU: its option ROM now is the baseline later checks compare with.
      auto digest = firmware::HashOptionRom(options_.root, gpu.pci_address);
      gpu.state = LeaseState::kFree;
      if (digest) {
        gpu.firmware_baseline = *digest;
      } else {
        gpu.state = LeaseState::kQuarantined;
        gpu.reason = "no firmware baseline: " + digest.error().message;
      }
      gpu.updated_ms = fleet::NowMs();
      gpus_.push_back(gpu);
    }
    mutations.push_back(gpus_.back());
  }
  for (auto& [id, gpu] : stored) {
    if (FindGpu(id)) continue;
    if (options_.fleet && !gpu.node.empty()) {
      // Its node has not published it yet: kept, with its lease, but not placed until it does.
      gpu.available = false;
      gpus_.push_back(std::move(gpu));
      continue;
    }
    spdlog::warn("GPU {} is in the store but not on the host", id);
  }
  if (auto status = store_->CommitAndWait(std::move(mutations)); !status) return status;
  return Ok();
}

void Service::Reconcile() {
  auto listed = backend_->List();
  std::map<std::string, backends::BackendContainer> present;
  if (listed) {
    for (auto& container : *listed) {
      std::string id = container.id;
      present.emplace(std::move(id), std::move(container));
    }
  } else {
    spdlog::warn("reconcile: backend {} cannot list containers: {}", backend_->name(),
                 listed.error().message);
  }
  std::vector<std::pair<std::string, bool>> to_watch;
  std::vector<std::string> orphans;
  {
    std::lock_guard lock(mu_);
    std::vector<Mutation> mutations;
    for (const auto& id : container_order_) {
      auto& container = containers_.at(id);
      if (fleet::IsTerminal(container.state) || !container.started) continue;
      auto it = present.find(id);
      if (!listed) {
        to_watch.emplace_back(id, true);
        continue;
      }
      if (it == present.end()) {
        FinishContainer(container,
                        backends::ExitInfo{std::nullopt, true,
                                           "vanished from backend " + backend_->name() +
                                               " while the service was down"},
                        mutations);
      } else if (it->second.state == backends::BackendState::kExited) {
        FinishContainer(container, backends::ExitInfo{it->second.exit_code, false, ""}, mutations);
      } else {
        if (container.state == ContainerState::kPending) {
          SetContainerState(container, ContainerState::kRunning);
          for (const auto& pci : container.gpus)
            if (auto* gpu = FindGpu(pci); gpu && gpu->state == LeaseState::kReserved)
              SetGpuState(*gpu, LeaseState::kActive, "", mutations);
          mutations.push_back(container);
        }
        // Created but not started: the service died while podman was starting it.
        to_watch.emplace_back(id, it->second.state != backends::BackendState::kCreated);
      }
    }
    for (const auto& [id, container] : present) {
      auto known = containers_.find(id);
      // Unknown: started by a submission that was never acknowledged. Known but not started:
      // its start was under way when the service died, and its `started` mark was not yet
      // durable; it is placed and started afresh, so this copy must go.
      if (known == containers_.end() || !known->second.started) orphans.push_back(id);
    }
    // GPUs whose lease outlived its container, or whose check was cut short.
    for (auto& gpu : gpus_) {
      if (!gpu.leased()) continue;
      auto it = containers_.find(gpu.container_id);
      bool holder_done = it == containers_.end() || fleet::IsTerminal(it->second.state);
      if ((gpu.state == LeaseState::kReserved || gpu.state == LeaseState::kActive) && holder_done) {
        SetGpuState(gpu, LeaseState::kReleasing, "", mutations);
      }
      if (gpu.state == LeaseState::kReleasing || gpu.state == LeaseState::kChecking)
        to_check_.push_back(gpu.id());
    }
    reschedule_ = true;
    CommitLocked(std::move(mutations), nullptr);
  }
  (void)store_->CommitAndWait({});
  for (const auto& [id, started] : to_watch) {
    auto on_exit = [this](const std::string& cid, const backends::ExitInfo& info) {
      OnExit(cid, info);
    };
    auto status = started ? backend_->Watch(id, on_exit) : backend_->Resume(id, on_exit);
    if (!status) OnExit(id, backends::ExitInfo{std::nullopt, true, status.error().message});
  }
  for (const auto& id : orphans) {
    spdlog::warn("reconcile: removing container {} that the store does not hold as running", id);
    (void)backend_->Remove(id);
  }
}

void Service::Start() {
  std::lock_guard lock(mu_);
  if (scheduler_.joinable()) return;
  stopping_ = false;
  pool_ = std::make_unique<boost::asio::thread_pool>(std::max(1, options_.start_workers));
  scheduler_ = std::thread([this] { SchedulerLoop(); });
  checker_ = std::thread([this] { CheckerLoop(); });
}

void Service::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  scheduler_wake_.notify_all();
  checker_wake_.notify_all();
  if (scheduler_.joinable()) scheduler_.join();
  if (checker_.joinable()) checker_.join();
  // Only the scheduler posts work, so none comes after this. A start handed over is marked
  // started in the store: it runs to its end rather than leave a container the next start of
  // the service would take for vanished. Work applies its outcome under mu_: joined without it.
  if (pool_) {
    pool_->join();
    pool_.reset();
  }
}

// ---------------------------------------------------------------------------------------------
// State changes (mu_ held).

GpuRecord* Service::FindGpu(const std::string& gpu_id) {
  // Split the ID ("<PCI>" or "<PCI>@<node>", GpuRecord::GpuId) once rather than building every
  // GPU's ID: with a fleet of nodes this runs over hundreds of GPUs per lookup.
  const auto at = gpu_id.find('@');
  const std::string_view pci = std::string_view(gpu_id).substr(0, at);
  const std::string_view node =
      at == std::string::npos ? std::string_view() : std::string_view(gpu_id).substr(at + 1);
  for (auto& gpu : gpus_)
    if (gpu.pci_address == pci && gpu.node == node) return &gpu;
  return nullptr;
}

void Service::SetGpuState(GpuRecord& gpu, LeaseState state, std::string reason,
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
  out.push_back(gpu);
}

void Service::SetContainerState(ContainerRecord& container, ContainerState state) {
  container_counts_[static_cast<int>(container.state)]--;
  container.state = state;
  container_counts_[static_cast<int>(state)]++;
}

void Service::ReleaseGpus(ContainerRecord& container, std::vector<Mutation>& out) {
  for (const auto& id : container.gpus) {
    auto* gpu = FindGpu(id);
    if (!gpu || gpu->container_id != container.id) continue;
    if (gpu->state == LeaseState::kReserved || gpu->state == LeaseState::kActive) {
      SetGpuState(*gpu, LeaseState::kReleasing, "", out);
      to_check_.push_back(id);
    }
  }
  checker_wake_.notify_one();
}

void Service::FinishContainer(ContainerRecord& container, const backends::ExitInfo& info,
                              std::vector<Mutation>& out) {
  if (fleet::IsTerminal(container.state)) return;
  if (info.failed) {
    SetContainerState(container, ContainerState::kFailed);
    container.reason = info.reason;
  } else {
    SetContainerState(container, ContainerState::kExited);
    container.exit_code = info.exit_code;
    if (container.stop_requested) container.reason = "stopped by request";
  }
  container.finished_ms = fleet::NowMs();
  spdlog::info("container {}: {}{}{}", container.id, fleet::ContainerStateName(container.state),
               container.exit_code ? " with code " + std::to_string(*container.exit_code) : "",
               container.reason.empty() ? "" : ": " + container.reason);
  ReleaseGpus(container, out);
  out.push_back(container);
}

bool Service::TryPlace(ContainerRecord& container, std::vector<Mutation>& out) {
  int want = container.spec.gpus;
  if (want == 0) return true;
  if (options_.fleet) return TryPlaceOnNodes(container, out);
  if (!chooser_) return false;
  topology::GpuMask available = 0;
  for (size_t i = 0; i < gpus_.size(); ++i)
    if (gpus_[i].state == LeaseState::kFree) available |= topology::GpuMask{1} << i;
  if (topology::MaskSize(available) < want) return false;
  auto mask = chooser_->ChooseMask(available, want);
  if (!mask) return false;
  container.gpus.clear();
  for (int index : topology::MaskToIndices(*mask)) {
    auto& gpu = gpus_[index];
    gpu.tenancy = container.spec.tenancy;
    gpu.container_id = container.id;
    SetGpuState(gpu, LeaseState::kReserved, "", out);
    container.gpus.push_back(gpu.id());
  }
  return true;
}

topology::GpuMask Service::FreeMaskLocked(size_t node) const {
  topology::GpuMask free = 0;
  const auto& indices = nodes_[node].gpus;
  for (size_t i = 0; i < indices.size(); ++i) {
    const GpuRecord& gpu = gpus_[indices[i]];
    if (gpu.state == LeaseState::kFree && gpu.available) free |= topology::GpuMask{1} << i;
  }
  return free;
}

// The node by the placement policy (over every node's free GPUs, as the fleet model sees them:
// module masks on partitioned nodes), then the GPUs on it by the node's topology chooser.
bool Service::TryPlaceOnNodes(ContainerRecord& container, std::vector<Mutation>& out) {
  const int want = container.spec.gpus;
  if (!placement_) return false;
  std::vector<topology::GpuMask> free(placement_nodes_.size());
  for (size_t f = 0; f < placement_nodes_.size(); ++f) {
    const Node& node = nodes_[placement_nodes_[f]];
    free[f] = FreeMaskLocked(placement_nodes_[f]);
    topology::GpuMask model = free[f];
    if (node.planner) {
      model = 0;
      for (size_t i = 0; i < node.module_of.size(); ++i)
        if ((free[f] >> i) & 1) model |= topology::GpuMask{1} << (node.module_of[i] - 1);
    }
    if (auto status = placement_->SetFreeMask(static_cast<int>(f), model); !status)
      spdlog::error("placement: node {}: {}", node.name, status.error().message);
  }
  const int chosen = placement_->ChooseNode(want, options_.policy);
  if (chosen < 0) return false;
  const Node& node = nodes_[placement_nodes_[chosen]];
  auto mask = node.chooser->ChooseMask(free[chosen], want);
  if (!mask) {
    spdlog::warn("placement: node {} chosen for {} GPUs but its chooser says: {}", node.name, want,
                 mask.error().message);
    return false;
  }
  container.gpus.clear();
  for (int index : topology::MaskToIndices(*mask)) {
    auto& gpu = gpus_[node.gpus[index]];
    gpu.tenancy = container.spec.tenancy;
    gpu.container_id = container.id;
    SetGpuState(gpu, LeaseState::kReserved, "", out);
    container.gpus.push_back(gpu.id());
  }
  return true;
}

void Service::RebuildFleetLocked() {
  placement_.reset();
  placement_nodes_.clear();
  std::vector<placement::NodeSpec> specs;
  for (size_t n = 0; n < nodes_.size(); ++n) {
    const Node& node = nodes_[n];
    if (!node.chooser || node.gpus.empty()) continue;
    if (!options_.only_node.empty() && node.name != options_.only_node) continue;
    placement::NodeSpec spec;
    spec.name = node.name;
    spec.gpu_count =
        node.planner ? node.planner->module_count() : static_cast<int>(node.gpus.size());
    spec.partitions = node.planner;
    specs.push_back(std::move(spec));
    placement_nodes_.push_back(n);
  }
  if (specs.empty()) return;
  auto created = placement::Fleet::Create(std::move(specs));
  if (!created) {
    spdlog::error("placement: {}", created.error().message);
    placement_nodes_.clear();
    return;
  }
  placement_ = std::move(*created);
}

Status Service::CheckGpuRequestLocked(int gpus) const {
  int largest = 0;
  for (size_t f = 0; f < placement_nodes_.size(); ++f) {
    const Node& node = nodes_[placement_nodes_[f]];
    largest = std::max(largest, static_cast<int>(node.gpus.size()));
    if (static_cast<int>(node.gpus.size()) < gpus) continue;
    if (!node.planner || node.planner->HasSize(gpus)) return Ok();
  }
  if (largest >= gpus)
    return FailedPrecondition("gpus: no node has a fabric partition of " + std::to_string(gpus) +
                              " GPUs");
  return FailedPrecondition("gpus: no node of the fleet has " + std::to_string(gpus) +
                            " GPUs (the largest has " + std::to_string(largest) + ")");
}

void Service::UpdateNodes(std::vector<NodeInventory> nodes) {
  std::lock_guard lock(mu_);
  std::vector<Mutation> mutations;
  std::set<std::string> listed;  // GPU IDs the nodes publish now
  std::vector<Node> updated;
  for (auto& inventory : nodes) {
    Node node;
    node.name = inventory.name;
    for (size_t i = 0; i < inventory.gpus.size(); ++i) {
      GpuRecord& gpu = inventory.gpus[i];
      gpu.node = inventory.name;
      gpu.index = static_cast<int>(i);
      listed.insert(gpu.id());
      GpuRecord* existing = FindGpu(gpu.id());
      if (existing) {
        bool changed = existing->model != gpu.model || existing->cdi_device != gpu.cdi_device ||
                       existing->index != gpu.index;
        existing->model = gpu.model;
        existing->cdi_device = gpu.cdi_device;
        existing->index = gpu.index;
        if (!existing->available) {
          spdlog::info("GPU {}: available again", existing->id());
          existing->available = true;
        }
        if (changed) mutations.push_back(*existing);
      } else {
        // The option ROM of a GPU on another node is not readable here: its post-lease check is
        // the backend's (firmware-check Job on the node), which keeps its own baseline.
        gpu.state = LeaseState::kFree;
        gpu.firmware_baseline = "checked on node " + inventory.name;
        gpu.updated_ms = fleet::NowMs();
        spdlog::info("GPU {}: new ({})", gpu.id(), gpu.model);
        gpus_.push_back(gpu);
        mutations.push_back(gpu);
        lease_dirty_ = true;
      }
      node.gpus.push_back(static_cast<size_t>(FindGpu(gpu.id()) - gpus_.data()));
    }
    if (!node.gpus.empty()) {
      auto chooser = topology::GpuChooser::Create(inventory.topology, inventory.partition_table);
      if (chooser) {
        node.chooser = std::move(*chooser);
        if (inventory.partition_table) {
          auto planner = topology::PartitionPlanner::Create(*inventory.partition_table);
          if (planner) {
            node.planner = *planner;
            for (const auto& gpu : inventory.gpus) {
              int module = 0;
              for (const auto& [m, address] : inventory.partition_table->pci_addresses)
                if (address == gpu.pci_address) module = m;
              node.module_of.push_back(module);
            }
          }
          // A GPU without a module is never free in partition mode (the chooser says the same).
          if (std::find(node.module_of.begin(), node.module_of.end(), 0) != node.module_of.end() ||
              !node.planner) {
            spdlog::warn("node {}: GPUs and partition table do not match; not placed on",
                         node.name);
            node.chooser.reset();
          }
        }
      } else {
        spdlog::warn("node {}: {}; not placed on", node.name, chooser.error().message);
      }
    }
    updated.push_back(std::move(node));
  }
  for (auto& gpu : gpus_) {
    if (gpu.node.empty() || !gpu.available || listed.count(gpu.id())) continue;
    spdlog::warn("GPU {}: no longer published by node {}; unavailable", gpu.id(), gpu.node);
    gpu.available = false;
  }
  nodes_ = std::move(updated);
  RebuildFleetLocked();
  reschedule_ = true;
  CommitLocked(std::move(mutations), nullptr);
  scheduler_wake_.notify_one();
}

void Service::CommitLocked(std::vector<Mutation> mutations, std::function<void(Status)> done) {
  if (lease_dirty_) WriteLeaseFileLocked();
  store_->Commit(std::move(mutations), std::move(done));
}

void Service::WriteLeaseFileLocked() {
  lease_dirty_ = false;
  if (options_.lease_file.empty()) return;
  // Format shared with the device plugin, which reports checking/quarantined/draining GPUs as
  // Unhealthy: {"version":1,"gpus":{"<PCI address>":{"state","reason","tenancy"}}}.
  nlohmann::json doc = {{"version", 1}, {"gpus", nlohmann::json::object()}};
  for (const auto& gpu : gpus_) {
    if (!gpu.node.empty()) continue;  // other nodes' lease files are written by their agents
    doc["gpus"][gpu.pci_address] = {{"state", fleet::LeaseStateName(gpu.state)},
                                    {"reason", gpu.reason},
                                    {"tenancy", gpu.tenancy}};
  }
  std::string text = doc.dump(2) + "\n";
  if (text == lease_file_written_) return;
  std::error_code error;
  std::filesystem::create_directories(std::filesystem::path(options_.lease_file).parent_path(),
                                      error);
  if (auto status = WriteFileAtomically(options_.lease_file, text, 0644); !status) {
    spdlog::error("lease file: {}", status.error().message);
    lease_dirty_ = true;
    return;
  }
  lease_file_written_ = std::move(text);
}

Result<const fleet::Tenancy*> Service::EnsureTenancyLocked(const std::string& name,
                                                           std::vector<Mutation>& out) {
  if (auto it = tenancies_.find(name); it != tenancies_.end()) return &it->second;
  auto uid = fleet::RandomHex(8);
  if (!uid) return uid.error();
  fleet::Tenancy tenancy;
  tenancy.name = name;
  tenancy.uid = std::move(*uid);
  tenancy.created_ms = fleet::NowMs();
  out.push_back(tenancy);
  return &(tenancies_[name] = std::move(tenancy));
}

// ---------------------------------------------------------------------------------------------
// Threads.

void Service::OnExit(const std::string& id, const backends::ExitInfo& info) {
  {
    std::lock_guard lock(mu_);
    exits_.push_back(ExitEvent{id, info});
  }
  scheduler_wake_.notify_one();
}

void Service::CheckerLoop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    checker_wake_.wait(lock, [this] { return stopping_ || !to_check_.empty(); });
    if (stopping_) break;
    std::string pci = std::move(to_check_.front());
    to_check_.pop_front();
    auto* gpu = FindGpu(pci);
    if (!gpu || (gpu->state != LeaseState::kReleasing && gpu->state != LeaseState::kChecking))
      continue;
    std::vector<Mutation> mutations;
    if (gpu->state == LeaseState::kReleasing)
      SetGpuState(*gpu, LeaseState::kChecking, "firmware check running", mutations);
    CommitLocked(std::move(mutations), nullptr);
    mutations.clear();
    GpuRecord snapshot = *gpu;
    busy_++;
    lock.unlock();
    auto [passed, reason] = RunFirmwareCheck(snapshot);
    lock.lock();
    busy_--;
    gpu = FindGpu(pci);
    if (!gpu || gpu->state != LeaseState::kChecking) continue;
    if (!passed) {
      SetGpuState(*gpu, LeaseState::kQuarantined, reason, mutations);
    } else if (gpu->quarantine_requested) {
      SetGpuState(*gpu, LeaseState::kQuarantined, "quarantined by an operator", mutations);
    } else if (gpu->drain_requested) {
      SetGpuState(*gpu, LeaseState::kDraining, "drained by an operator", mutations);
    } else {
      SetGpuState(*gpu, LeaseState::kFree, "", mutations);
    }
    gpu->quarantine_requested = false;
    gpu->drain_requested = false;
    mutations.back() = *gpu;
    reschedule_ = true;
    CommitLocked(std::move(mutations), nullptr);
    scheduler_wake_.notify_one();
    idle_.notify_all();
  }
}

std::pair<bool, std::string> Service::RunFirmwareCheck(const GpuRecord& gpu) const {
  if (!gpu.node.empty()) {
    // On another node: the backend checks it there.
    auto verdict = backend_->AwaitGpuCheck(gpu.container_id, options_.firmware.timeout);
    if (!verdict) return {false, "firmware check: " + verdict.error().message};
    return {verdict->passed, verdict->reason};
  }
  std::string program = options_.firmware.command;
  if (auto it = options_.firmware.per_gpu.find(gpu.pci_address);
      it != options_.firmware.per_gpu.end())
    program = it->second;
  if (!program.empty()) {
    std::vector<std::string> argv;
    size_t start = 0;
    while (start < program.size()) {
      size_t end = program.find(' ', start);
      if (end == std::string::npos) end = program.size();
      if (end > start) argv.push_back(program.substr(start, end - start));
      start = end + 1;
    }
    argv.push_back(gpu.pci_address);
    process::Options run;
    run.timeout_ms = static_cast<int>(options_.firmware.timeout.count());
    run.max_output = 4096;
    auto outcome = process::Run(argv, run);
    if (!outcome) return {false, "firmware check: " + outcome.error().message};
    std::string output = outcome->output;
    while (!output.empty() && (output.back() == '\n' || output.back() == ' '))
      output.pop_back();
    if (outcome->timed_out)
      return {false, "firmware check " + process::Describe(argv) + " timed out after " +
                         std::to_string(options_.firmware.timeout.count()) + " ms"};
    if (outcome->status != 0)
      return {false, "firmware check " + process::Describe(argv) + " exited with status " +
                         std::to_string(outcome->status) + (output.empty() ? "" : ": " + output)};
    return {true, ""};
  }
  auto digest = firmware::HashOptionRom(options_.root, gpu.pci_address);
  if (!digest)
    return {false, "firmware check: cannot read the option ROM: " + digest.error().message};
  auto verdict = firmware::CompareWithBaseline(gpu.firmware_baseline, *digest);
  if (!verdict.passed) return {false, "firmware check: " + verdict.reason};
  return {true, ""};
}

// ---------------------------------------------------------------------------------------------
// API operations.

void Service::SetAdminTokenHash(std::string sha256) {
  std::lock_guard lock(mu_);
  admin_hash_ = std::move(sha256);
}

Result<Caller> Service::Authenticate(std::string_view token) const {
  if (token.empty()) return PermissionDenied("missing bearer token");
  std::string hash = fleet::Sha256Hex(token);
  std::lock_guard lock(mu_);
  if (!admin_hash_.empty() && hash == admin_hash_) return Caller{true, "", ""};
  auto it = tokens_.find(hash);
  if (it == tokens_.end()) return PermissionDenied("unknown token");
  // A token acts for the incarnation it was made for, never for a later owner of the name.
  auto tenancy = tenancies_.find(it->second.tenancy);
  if (tenancy == tenancies_.end() || tenancy->second.uid != it->second.tenancy_uid)
    return PermissionDenied("unknown token");
  return Caller{false, it->second.tenancy, it->second.tenancy_uid};
}

void Service::PutTenancy(const Caller& caller, fleet::Tenancy tenancy, Done<fleet::Tenancy> done) {
  if (auto problem = fleet::CheckTenancyName(tenancy.name); !problem.empty())
    return done(InvalidArgument("tenancy name \"" + tenancy.name + "\": " + problem));
  // Labels and extensions are the admin's metadata about a tenancy, and entitlements live in the
  // extensions: a tenant writing them would grant itself access.
  if (!caller.admin)
    return done(PermissionDenied(
        "only the admin creates or changes tenancies: labels and extensions are admin metadata"));
  auto uid = fleet::RandomHex(8);
  if (!uid) return done(uid.error());
  std::unique_lock lock(mu_);
  auto it = tenancies_.find(tenancy.name);
  const std::string storage_key(tenancy::kStorageExtension);
  if (auto storage = tenancy.extensions.find(storage_key); storage != tenancy.extensions.end()) {
    auto parsed = tenancy::ParseStorageEntitlements(storage->second);
    if (!parsed) return done(parsed.error().WithContext("extensions.storage"));
    storage->second = tenancy::StorageEntitlementsToJson(*parsed);
  }
  if (it != tenancies_.end()) {
    tenancy.created_ms = it->second.created_ms;
    tenancy.uid = it->second.uid;
    // Entitlements other components attached stay unless the body replaces them.
    for (const auto& [key, value] : it->second.extensions)
      tenancy.extensions.emplace(key, value);
  } else {
    tenancy.created_ms = fleet::NowMs();
    tenancy.uid = std::move(*uid);
  }
  tenancies_[tenancy.name] = tenancy;
  CommitLocked({tenancy}, [done = std::move(done), tenancy](Status status) {
    if (!status) return done(status.error());
    done(tenancy);
  });
}

Result<fleet::Tenancy> Service::GetTenancy(const Caller& caller, const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = tenancies_.find(name);
  if (it == tenancies_.end() || !caller.Sees(it->second))
    return NotFound("tenancy " + name + " not found");
  return it->second;
}

std::vector<fleet::Tenancy> Service::ListTenancies(const Caller& caller) const {
  std::lock_guard lock(mu_);
  std::vector<fleet::Tenancy> out;
  for (const auto& [name, tenancy] : tenancies_)
    if (caller.Sees(tenancy)) out.push_back(tenancy);
  return out;
}

void Service::CreateToken(const Caller& caller, const std::string& tenancy,
                          Done<CreatedToken> done) {
  if (!caller.admin) return done(PermissionDenied("only the admin token creates tokens"));
  auto secret = fleet::RandomHex(24);
  auto id = fleet::RandomHex(4);
  if (!secret || !id) return done(Internal("token: no randomness"));
  CreatedToken created;
  created.secret = "tsr_" + *secret;
  created.record.id = "t-" + *id;
  created.record.sha256 = fleet::Sha256Hex(created.secret);
  created.record.tenancy = tenancy;
  created.record.created_ms = fleet::NowMs();
  std::lock_guard lock(mu_);
  auto it = tenancies_.find(tenancy);
  if (it == tenancies_.end()) return done(NotFound("tenancy " + tenancy + " not found"));
  created.record.tenancy_uid = it->second.uid;
  tokens_[created.record.sha256] = created.record;
  CommitLocked({created.record}, [done = std::move(done), created](Status status) {
    if (!status) return done(status.error());
    done(created);
  });
}

void Service::PutStorage(const Caller& caller, const std::string& name,
                         tenancy::StorageEntitlements storage,
                         Done<tenancy::StorageEntitlements> done) {
  if (auto problem = fleet::CheckTenancyName(name); !problem.empty())
    return done(InvalidArgument("tenancy name \"" + name + "\": " + problem));
  if (!caller.admin) return done(PermissionDenied("only the admin sets storage entitlements"));
  std::unique_lock lock(mu_);
  std::vector<Mutation> mutations;
  auto ensured = EnsureTenancyLocked(name, mutations);
  if (!ensured) return done(ensured.error());
  fleet::Tenancy tenancy = **ensured;
  tenancy.extensions[std::string(tenancy::kStorageExtension)] =
      tenancy::StorageEntitlementsToJson(storage);
  tenancies_[name] = tenancy;
  CommitLocked({tenancy}, [done = std::move(done), storage = std::move(storage)](Status status) {
    if (!status) return done(status.error());
    done(storage);
  });
}

Result<tenancy::StorageEntitlements> Service::GetStorage(const Caller& caller,
                                                         const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = tenancies_.find(name);
  if (it == tenancies_.end() || !caller.Sees(it->second))
    return NotFound("tenancy " + name + " not found");
  return StorageOf(it->second);
}

Status Service::PrepareTenancy(const std::string& name) {
  tenancy::StorageEntitlements storage;
  {
    std::lock_guard lock(mu_);
    auto it = tenancies_.find(name);
    if (it == tenancies_.end()) return NotFound("tenancy " + name + " not found");
    storage = StorageOf(it->second);
  }
  return backend_->PrepareTenancy(name, storage);
}

Status Service::DeleteTenancy(const Caller& caller, const std::string& name) {
  if (!caller.admin) return PermissionDenied("only the admin deletes tenancies");
  // Every container of the tenancy must have ended; returns the ended ones.
  auto ended_containers = [this, &name]() -> Result<std::vector<std::string>> {
    std::vector<std::string> ended;
    for (const auto& [id, container] : containers_) {
      if (container.spec.tenancy != name) continue;
      if (!fleet::IsTerminal(container.state))
        return FailedPrecondition("tenancy " + name + ": container " + id + " is " +
                                  fleet::ContainerStateName(container.state) + "; delete it first");
      ended.push_back(id);
    }
    return ended;
  };
  std::vector<std::string> ended;
  {
    std::lock_guard lock(mu_);
    if (!tenancies_.count(name)) return NotFound("tenancy " + name + " not found");
    auto listed = ended_containers();
    if (!listed) return listed.error();
    ended = std::move(*listed);
  }
  // podman keeps ended containers (for their logs), and they would keep the network in use.
  for (const auto& id : ended) {
    auto removed = backend_->Remove(id);
    if (!removed && removed.error().category != ErrorCategory::kNotFound) return removed;
  }
  if (auto released = backend_->ReleaseTenancy(name); !released) return released;
  std::promise<Status> committed;
  {
    std::lock_guard lock(mu_);
    // A submission may have come in while the backend worked: it keeps the tenancy.
    if (auto listed = ended_containers(); !listed) return listed.error();
    // Its records stay as the admin's history; its keys go, so a later owner of the name is
    // never answered with them.
    auto tenancy = tenancies_.find(name);
    if (tenancy == tenancies_.end()) return NotFound("tenancy " + name + " not found");
    const std::string prefix = tenancy->second.uid + '\n';
    std::erase_if(idempotency_,
                  [&prefix](const auto& entry) { return entry.first.starts_with(prefix); });
    tenancies_.erase(tenancy);
    for (auto it = tokens_.begin(); it != tokens_.end();)
      it = it->second.tenancy == name ? tokens_.erase(it) : std::next(it);
    CommitLocked({fleet::TenancyDeletion{name}},
                 [&committed](Status status) { committed.set_value(std::move(status)); });
  }
  return committed.get_future().get();
}

void Service::Submit(const Caller& caller, fleet::ContainerSpec spec, std::string idempotency_key,
                     Done<SubmitResult> done) {
  if (auto problem = fleet::CheckTenancyName(spec.tenancy); !problem.empty())
    return done(InvalidArgument("tenancy: \"" + spec.tenancy + "\" " + problem));
  if (!caller.admin && caller.tenancy != spec.tenancy)
    return done(NotFound("tenancy " + spec.tenancy + " not found"));
  if (spec.gpus < 0 || spec.gpus > fleet::kMaxGpusPerContainer)
    return done(InvalidArgument("gpus: must be 0.." + std::to_string(fleet::kMaxGpusPerContainer)));
  if (spec.gpus > 0 && options_.fleet) {
    std::lock_guard lock(mu_);
    if (auto status = CheckGpuRequestLocked(spec.gpus); !status) return done(status.error());
  } else if (spec.gpus > 0) {
    if (static_cast<size_t>(spec.gpus) > gpus_.size())
      return done(FailedPrecondition("gpus: this host has " + std::to_string(gpus_.size()) +
                                     " GPUs, " + std::to_string(spec.gpus) + " requested"));
    if (chooser_ && chooser_->planner() && !chooser_->planner()->HasSize(spec.gpus))
      return done(FailedPrecondition("gpus: no fabric partition has " + std::to_string(spec.gpus) +
                                     " GPUs"));
  }
  if (auto status = backend_->CheckIsolation(spec.isolation, spec.gpus); !status)
    return done(status.error());
  auto random = fleet::RandomHex(8);
  if (!random) return done(random.error());

  std::lock_guard lock(mu_);
  auto tenancy_it = tenancies_.find(spec.tenancy);
  // A token outliving its incarnation (deleted while this request was under way) acts for none.
  if (!caller.admin && (tenancy_it == tenancies_.end() || !caller.Sees(tenancy_it->second)))
    return done(NotFound("tenancy " + spec.tenancy + " not found"));
  if (!spec.volumes.empty()) {
    // 403 naming the volume for anything the tenancy is not entitled to (the backend resolves
    // again at start, in case the entitlement is withdrawn in between).
    auto resolved =
        tenancy::ResolveVolumes(spec.tenancy,
                                tenancy_it == tenancies_.end() ? tenancy::StorageEntitlements{}
                                                               : StorageOf(tenancy_it->second),
                                spec.volumes);
    if (!resolved) return done(resolved.error());
  }
  // Keys are scoped to the incarnation; a tenancy the admin's submission creates has none yet.
  if (!idempotency_key.empty() && tenancy_it != tenancies_.end()) {
    auto it = idempotency_.find(tenancy_it->second.uid + '\n' + idempotency_key);
    if (it != idempotency_.end()) {
      const auto& existing = containers_.at(it->second);
      if (existing.spec != spec)
        return done(AlreadyExists("Idempotency-Key \"" + idempotency_key +
                                  "\" was used for a different request (container " + existing.id +
                                  ")"));
      // The first submission may still be in flight: answer after it is durable too.
      store_->Commit({}, [done = std::move(done), existing](Status status) {
        if (!status) return done(status.error());
        done(SubmitResult{existing, true});
      });
      return;
    }
  }
  std::vector<Mutation> mutations;
  auto tenancy = EnsureTenancyLocked(spec.tenancy, mutations);
  if (!tenancy) return done(tenancy.error());
  ContainerRecord container;
  container.id = "c-" + *random;
  container.spec = std::move(spec);
  container.tenancy_uid = (*tenancy)->uid;
  container.idempotency_key = std::move(idempotency_key);
  container.created_ms = fleet::NowMs();
  mutations.push_back(container);
  container_counts_[static_cast<int>(ContainerState::kPending)]++;
  if (!container.idempotency_key.empty())
    idempotency_[container.tenancy_uid + '\n' + container.idempotency_key] = container.id;
  container_position_[container.id] = container_order_.size();
  container_order_.push_back(container.id);
  pending_.push_back(container.id);
  reschedule_ = true;
  containers_.emplace(container.id, container);
  CommitLocked(std::move(mutations),
               [done = std::move(done), container = std::move(container)](Status status) {
                 if (!status) return done(status.error());
                 done(SubmitResult{container, false});
               });
  scheduler_wake_.notify_one();
}

Result<ContainerRecord> Service::GetContainer(const Caller& caller, const std::string& id) const {
  std::lock_guard lock(mu_);
  auto it = containers_.find(id);
  if (it == containers_.end() || !caller.Sees(it->second))
    return NotFound("container " + id + " not found");
  return it->second;
}

Result<ContainerPage> Service::ListContainers(const Caller& caller,
                                              const ContainerQuery& query) const {
  std::lock_guard lock(mu_);
  const size_t count = container_order_.size();
  // Walk positions 0..count-1 in the requested direction, starting after the cursor.
  size_t step = 0;
  if (!query.after.empty()) {
    auto at = container_position_.find(query.after);
    if (at == container_position_.end() || !caller.Sees(containers_.at(query.after)))
      return InvalidArgument("after: no container " + query.after);
    step = query.newest_first ? count - at->second : at->second + 1;
  }
  auto matches = [&](const ContainerRecord& container) {
    if (!caller.Sees(container)) return false;
    if (!query.tenancy.empty() && container.spec.tenancy != query.tenancy) return false;
    if (query.states.empty()) return true;
    return std::find(query.states.begin(), query.states.end(), container.state) !=
           query.states.end();
  };
  ContainerPage page;
  const size_t limit = std::clamp<size_t>(query.limit, 1, ContainerQuery::kMaxLimit);
  page.containers.reserve(std::min(limit, count));
  size_t bytes = 0;
  for (; step < count; ++step) {
    const size_t position = query.newest_first ? count - 1 - step : step;
    const auto& container = containers_.at(container_order_[position]);
    if (!matches(container)) continue;
    const size_t size = EstimatedJsonBytes(container);
    if (page.containers.size() == limit ||
        (!page.containers.empty() && bytes + size > query.max_bytes)) {
      // One more match exists: the page is full and there is a next one.
      page.next = page.containers.back().id;
      break;
    }
    bytes += size;
    page.containers.push_back(container);
  }
  return page;
}

void Service::DeleteContainer(const Caller& caller, const std::string& id,
                              Done<ContainerRecord> done) {
  std::lock_guard lock(mu_);
  auto it = containers_.find(id);
  if (it == containers_.end() || !caller.Sees(it->second))
    return done(NotFound("container " + id + " not found"));
  auto& container = it->second;
  std::vector<Mutation> mutations;
  if (!fleet::IsTerminal(container.state) && !container.stop_requested) {
    container.stop_requested = true;
    if (!container.started) {
      FinishContainer(container,
                      backends::ExitInfo{std::nullopt, true, "deleted before it started"},
                      mutations);
    } else {
      mutations.push_back(container);
      if (container.state == ContainerState::kRunning) to_stop_.push_back(container.id);
      scheduler_wake_.notify_one();
    }
  }
  CommitLocked(std::move(mutations), [done = std::move(done), container](Status status) {
    if (!status) return done(status.error());
    done(container);
  });
}

Result<std::string> Service::Logs(const Caller& caller, const std::string& id) {
  {
    std::lock_guard lock(mu_);
    auto it = containers_.find(id);
    if (it == containers_.end() || !caller.Sees(it->second))
      return NotFound("container " + id + " not found");
    if (!it->second.started) return std::string();
  }
  auto logs = backend_->Logs(id);
  if (!logs && logs.error().category == ErrorCategory::kNotFound) return std::string();
  return logs;
}

std::vector<GpuRecord> Service::ListGpus(const Caller& caller) const {
  std::lock_guard lock(mu_);
  std::vector<GpuRecord> out = gpus_;
  if (!caller.admin) {
    for (auto& gpu : out) {
      // The holder's name is not enough: an earlier owner of the name is someone else.
      auto holder = containers_.find(gpu.container_id);
      if (holder == containers_.end() || !caller.Sees(holder->second)) {
        gpu.tenancy.clear();
        gpu.container_id.clear();
      }
      gpu.firmware_baseline.clear();
    }
  }
  return out;
}

void Service::GpuAdmin(const Caller& caller, const std::string& gpu_id, GpuAction action,
                       std::string reason, Done<GpuRecord> done) {
  if (!caller.admin) return done(PermissionDenied("GPU administration needs the admin token"));
  std::lock_guard lock(mu_);
  auto* gpu = FindGpu(gpu_id);
  if (!gpu) return done(NotFound("GPU " + gpu_id + " not found"));
  const std::string& pci_address = gpu_id;
  std::vector<Mutation> mutations;
  const LeaseState state = gpu->state;
  const bool held = state == LeaseState::kReserved || state == LeaseState::kActive;
  switch (action) {
    case GpuAction::kDrain:
      if (state == LeaseState::kFree) {
        SetGpuState(*gpu, LeaseState::kDraining, reason.empty() ? "drained by an operator" : reason,
                    mutations);
      } else if (gpu->leased()) {
        gpu->drain_requested = true;
        mutations.push_back(*gpu);
      }
      break;
    case GpuAction::kUndrain:
      if (state == LeaseState::kDraining) {
        SetGpuState(*gpu, LeaseState::kFree, "", mutations);
        reschedule_ = true;
      } else if (gpu->leased()) {
        gpu->drain_requested = false;
        mutations.push_back(*gpu);
      } else if (state == LeaseState::kQuarantined) {
        return done(FailedPrecondition("GPU " + pci_address +
                                       " is quarantined, not draining; release it instead"));
      }
      break;
    case GpuAction::kQuarantine:
      if (state == LeaseState::kFree || state == LeaseState::kDraining) {
        SetGpuState(*gpu, LeaseState::kQuarantined,
                    reason.empty() ? "quarantined by an operator" : reason, mutations);
      } else if (gpu->leased()) {
        gpu->quarantine_requested = true;
        mutations.push_back(*gpu);
      }
      break;
    case GpuAction::kRelease:
      if (state == LeaseState::kQuarantined || state == LeaseState::kDraining) {
        // The operator vouches for the firmware as it is now: it becomes the new baseline (on
        // another node, the backend's check keeps its own).
        if (gpu->node.empty()) {
          auto digest = firmware::HashOptionRom(options_.root, gpu->pci_address);
          if (!digest) return done(digest.error());
          gpu->firmware_baseline = *digest;
        }
        gpu->drain_requested = gpu->quarantine_requested = false;
        SetGpuState(*gpu, LeaseState::kFree, "", mutations);
        reschedule_ = true;
      } else if (held) {
        // End the lease the normal way: stop the holder; its exit runs the check.
        auto it = containers_.find(gpu->container_id);
        if (it != containers_.end() && !fleet::IsTerminal(it->second.state)) {
          it->second.stop_requested = true;
          mutations.push_back(it->second);
          if (it->second.state == ContainerState::kRunning) to_stop_.push_back(it->first);
        }
      } else if (state == LeaseState::kReleasing || state == LeaseState::kChecking) {
        return done(FailedPrecondition("GPU " + pci_address + " is " +
                                       fleet::LeaseStateName(state) +
                                       "; its firmware check decides what comes next"));
      }
      break;
  }
  scheduler_wake_.notify_one();
  GpuRecord result = *gpu;
  CommitLocked(std::move(mutations), [done = std::move(done), result](Status status) {
    if (!status) return done(status.error());
    done(result);
  });
}

Counts Service::counts() const {
  Counts counts;
  counts.store = store_->stats();
  std::lock_guard lock(mu_);
  for (const auto& gpu : gpus_)
    counts.gpus[static_cast<int>(gpu.state)]++;
  counts.containers = container_counts_;
  return counts;
}

bool Service::WaitIdle(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return idle_.wait_for(lock, timeout, [this] {
    bool running = false;
    for (const auto& gpu : gpus_)
      running = running || gpu.leased();
    return pending_.empty() && exits_.empty() && to_check_.empty() && busy_ == 0 && !running;
  });
}

}  // namespace tessera::serve

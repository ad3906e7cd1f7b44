// The node's one owner of fabric partitions: the ledger, every fabric-manager call serialised
// under one mutex, and the restart watch.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/atomic_file.h"
#include "common/bounded_file.h"
#include "fabricmanager/fabricmanager.h"

namespace tessera::fabricmanager {
namespace {

using Clock = std::chrono::steady_clock;

bool Contains(const std::vector<uint32_t>& ids, uint32_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

std::string IdList(const std::vector<uint32_t>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i)
    out += (i ? "," : "") + std::to_string(ids[i]);
  return out + "]";
}

}  // namespace

PartitionActivator::PartitionActivator(ActivatorOptions options, PartitionLedger ledger)
    : options_(std::move(options)), ledger_(std::move(ledger)) {
  fabric_ = std::move(options_.connected);
  stats_.active = ledger_.Held().size();
}

PartitionActivator::~PartitionActivator() {
  {
    std::lock_guard lock(stop_mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (watch_.joinable()) watch_.join();
}

Result<std::unique_ptr<PartitionActivator>> PartitionActivator::Open(ActivatorOptions options) {
  if (!options.connect) return InvalidArgument("fabric activator: no way to connect");
  if (options.poll_interval > std::chrono::seconds(2) ||
      options.poll_interval < std::chrono::milliseconds(10)) {
    return InvalidArgument("fabric activator: the restart watch must poll every 10 ms .. 2 s");
  }
  auto planner = topology::PartitionPlanner::Create(options.table);
  if (!planner) return planner.error().WithContext("fabric partition table");
  if (static_cast<int>(options.table.pci_addresses.size()) != options.table.module_count) {
    return InvalidArgument("fabric partition table: every module needs a PCI address");
  }
  PartitionLedger ledger(*planner);
  auto text = ReadBoundedFile(options.state_path, kMaxStateFileBytes);
  if (text) {
    auto parsed = PartitionLedger::Parse(*text, *planner);
    if (!parsed) return parsed.error().WithContext(options.state_path);
    ledger = std::move(*parsed);
  } else if (text.error().category != ErrorCategory::kNotFound) {
    return text.error();
  }
  return std::unique_ptr<PartitionActivator>(
      new PartitionActivator(std::move(options), std::move(ledger)));
}

void PartitionActivator::StartWatch() {
  if (watch_.joinable()) return;
  watch_ = std::thread([this] {
    std::unique_lock lock(stop_mu_);
    while (!stopping_) {
      if (stop_cv_.wait_for(lock, options_.poll_interval, [this] { return stopping_; })) break;
      lock.unlock();
      WatchOnce();
      lock.lock();
    }
  });
}

Result<FabricManager*> PartitionActivator::ConnectedLocked() {
  if (!fabric_) {
    auto connected = options_.connect();
    if (!connected) return connected.error();
    fabric_ = std::move(*connected);
    spdlog::debug("fabric manager: {}", fabric_->Describe());
  }
  return fabric_.get();
}

Error PartitionActivator::DropLocked(const Error& error) {
  fabric_.reset();
  return error;
}

Status PartitionActivator::SaveLocked() {
  stats_.active = ledger_.Held().size();
  // Whole after a power loss, but the change itself may be lost: a power loss ends every
  // container and the fabric manager's state too, and the next reconcile drops holders that are
  // gone. Surviving a crash of this process is what the ledger is for.
  return WriteFileAtomically(options_.state_path, ledger_.ToJson(), 0600,
                             Durability::kWholeOnPowerLoss);
}

// A restarted fabric manager drops its connections and, in its resiliency mode
// (FABRIC_MODE_RESTART=1), answers every call but fmSetActivatedFabricPartitions with
// FM_ST_NOT_CONFIGURED until it is told which partitions are active (an empty list too); it
// exits when not told within 60 s. So: connect afresh, and when the list is refused, send the
// held partitions.
Status PartitionActivator::ResendActiveListLocked(const char* why) {
  const auto noticed = Clock::now();
  fabric_.reset();
  auto fabric = ConnectedLocked();
  if (!fabric) return fabric.error();
  auto listed = (*fabric)->ListPartitions();
  if (listed) return Ok();  // serving: it did not restart in resiliency mode (or not at all)
  if (listed.error().category != ErrorCategory::kUnavailable) return listed.error();
  if (IsNoAnswer(listed.error())) return DropLocked(listed.error());
  const std::vector<uint32_t> held = ledger_.Held();
  if (auto sent = (*fabric)->SetActivatedPartitions(held); !sent) {
    fabric_.reset();
    return sent.error();
  }
  stats_.restarts++;
  stats_.last_resend_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - noticed).count();
  spdlog::warn(
      "fabric manager restarted ({}: {}); sent it the active partition list {} ({} restarts so "
      "far)",
      why, listed.error().message, IdList(held), stats_.restarts);
  return Ok();
}

Result<std::vector<uint32_t>> PartitionActivator::ActiveOnFabricLocked() {
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto fabric = ConnectedLocked();
    if (!fabric) return fabric.error();
    auto listed = (*fabric)->ListPartitions();
    if (listed) {
      std::vector<uint32_t> active;
      for (const auto& partition : *listed)
        if (partition.active) active.push_back(partition.id);
      return active;
    }
    if (IsNoAnswer(listed.error())) return DropLocked(listed.error());
    if (listed.error().category != ErrorCategory::kUnavailable || attempt > 0)
      return listed.error();
    if (auto resent = ResendActiveListLocked("list refused"); !resent) return resent.error();
  }
  return Unavailable("fabric manager: no answer");
}

Status PartitionActivator::ActivateOnFabricLocked(uint32_t partition) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto fabric = ConnectedLocked();
    if (!fabric) return fabric.error();
    auto activated = (*fabric)->Activate(partition);
    if (activated) return Ok();
    const Error& error = activated.error();
    // No answer: asking again (or resending the list) would wait again; the caller gets it now.
    if (IsNoAnswer(error)) return DropLocked(error);
    if (error.category == ErrorCategory::kUnavailable && attempt == 0) {
      if (auto resent = ResendActiveListLocked("activation refused"); !resent) return error;
      continue;
    }
    // FM_ST_IN_USE for the partition itself: it is active already, which is what we want.
    if (error.category == ErrorCategory::kFailedPrecondition) {
      auto active = ActiveOnFabricLocked();
      if (active && Contains(*active, partition)) return Ok();
    }
    return error;
  }
  return Unavailable("fabric manager: no answer");
}

Status PartitionActivator::DeactivateOnFabricLocked(uint32_t partition) {
  const auto deadline = Clock::now() + options_.deactivate_retry_for;
  for (;;) {
    auto fabric = ConnectedLocked();
    Status result = fabric ? (*fabric)->Deactivate(partition) : Status(fabric.error());
    if (result) return Ok();
    const Error& error = result.error();
    // No answer: the watch retries it later, while this caller and those behind it go on.
    if (IsNoAnswer(error)) return DropLocked(error);
    if (error.category != ErrorCategory::kUnavailable) {
      // Refused because it is not active: what we want.
      auto active = ActiveOnFabricLocked();
      if (active && !Contains(*active, partition)) return Ok();
      return error;
    }
    if (Clock::now() >= deadline) return error;
    (void)ResendActiveListLocked("deactivation refused");
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

Result<uint32_t> PartitionActivator::Activate(const std::string& holder,
                                              const std::vector<std::string>& pci_addresses) {
  std::lock_guard lock(mu_);
  auto failed = [&](const Error& error) -> Error {
    stats_.activation_failures++;
    return error;
  };
  auto partition = ledger_.PartitionOf(pci_addresses);
  if (!partition) return failed(partition.error());
  const std::string name = "fabric partition " + std::to_string(*partition) + " " +
                           ModuleSet(options_.table.Find(*partition)->modules);
  PartitionLedger next = ledger_;
  auto held = next.Hold(holder, *partition);
  if (!held) return failed(held.error().WithContext(name));
  if (!*held) {
    if (auto activated = ActivateOnFabricLocked(*partition); !activated) {
      // Unanswered, it may still take effect: the watch deactivates it if it turns up active.
      if (IsNoAnswer(activated.error()) && !Contains(pending_deactivation_, *partition))
        pending_deactivation_.push_back(*partition);
      return failed(activated.error().WithContext("activate " + name));
    }
    stats_.activations++;
  }
  // Recorded once active: a crash before this leaves an active partition nobody holds, which
  // the next reconcile deactivates (nothing was started on it).
  PartitionLedger before = std::move(ledger_);
  ledger_ = std::move(next);
  if (auto saved = SaveLocked(); !saved) {
    ledger_ = std::move(before);
    if (!*held) (void)DeactivateOnFabricLocked(*partition);
    stats_.active = ledger_.Held().size();
    return failed(saved.error().WithContext(name));
  }
  spdlog::info("{} active for {}", name, holder);
  return *partition;
}

Status PartitionActivator::EnsureActive(const std::string& holder) {
  std::lock_guard lock(mu_);
  auto partition = ledger_.HeldBy(holder);
  if (!partition) return NotFound(holder + " holds no fabric partition");
  auto active = ActiveOnFabricLocked();
  if (!active) return active.error();
  if (Contains(*active, *partition)) return Ok();
  if (auto activated = ActivateOnFabricLocked(*partition); !activated) {
    stats_.activation_failures++;
    return activated.error().WithContext("activate fabric partition " + std::to_string(*partition));
  }
  stats_.activations++;
  return Ok();
}

Status PartitionActivator::Deactivate(const std::string& holder) {
  std::lock_guard lock(mu_);
  if (!ledger_.HeldBy(holder)) return Ok();
  PartitionLedger next = ledger_;
  auto released = next.Release(holder);
  Status result = Ok();
  if (released) {
    result = DeactivateOnFabricLocked(*released);
    if (result) {
      stats_.deactivations++;
      spdlog::info("fabric partition {} deactivated ({} released it)", *released, holder);
    } else {
      stats_.deactivation_failures++;
      if (!Contains(pending_deactivation_, *released)) pending_deactivation_.push_back(*released);
      spdlog::error("fabric partition {} ({} released it): {}; retried every {} ms", *released,
                    holder, result.error().message, options_.poll_interval.count());
    }
  }
  // The holder is gone either way; a partition left active is retried by the watch and
  // deactivated by the next reconcile.
  ledger_ = std::move(next);
  if (auto saved = SaveLocked(); !saved) return saved;
  return result;
}

Status PartitionActivator::Reconcile(const std::function<bool(const std::string&)>& alive) {
  std::lock_guard lock(mu_);
  auto active = ActiveOnFabricLocked();
  if (!active) return active.error().WithContext("reconcile fabric partitions");
  ReconcilePlan plan = PlanReconcile(ledger_, *active, alive);
  if (plan.empty()) return Ok();
  for (const auto& holder : plan.drop)
    ledger_.Release(holder);
  Status result = Ok();
  for (uint32_t id : plan.deactivate) {
    if (auto done = DeactivateOnFabricLocked(id); !done) {
      if (!Contains(pending_deactivation_, id)) pending_deactivation_.push_back(id);
      if (result) result = done;
    } else {
      stats_.deactivations++;
    }
  }
  for (uint32_t id : plan.activate) {
    if (auto done = ActivateOnFabricLocked(id); !done) {
      stats_.activation_failures++;
      spdlog::error("fabric partition {} is held but inactive and cannot be activated: {}", id,
                    done.error().message);
      if (result) result = done;
    } else {
      stats_.activations++;
    }
  }
  spdlog::info(
      "fabric partitions reconciled: dropped {} ended holders, deactivated {} partitions nothing "
      "holds, activated {} held partitions again",
      plan.drop.size(), IdList(plan.deactivate), IdList(plan.activate));
  if (auto saved = SaveLocked(); !saved) return saved;
  return result;
}

void PartitionActivator::WatchOnce() {
  std::lock_guard lock(mu_);
  auto fabric = ConnectedLocked();
  Result<std::vector<SupportedPartition>> listed =
      fabric ? (*fabric)->ListPartitions()
             : Result<std::vector<SupportedPartition>>(fabric.error());
  // A fabric manager that stays away says so every round: each new problem is logged once.
  auto report = [this](const std::string& problem) {
    if (problem != last_watch_problem_ && !problem.empty())
      spdlog::warn("fabric manager watch: {}", problem);
    last_watch_problem_ = problem;
  };
  if (!listed) {
    if (listed.error().category != ErrorCategory::kUnavailable || IsNoAnswer(listed.error())) {
      if (IsNoAnswer(listed.error())) fabric_.reset();
      report(listed.error().message);
      return;
    }
    auto resent = ResendActiveListLocked("watch");
    report(resent ? "" : resent.error().message);
    return;
  }
  report("");
  std::vector<uint32_t> active;
  for (const auto& partition : *listed)
    if (partition.active) active.push_back(partition.id);
  // A held partition the fabric manager forgot (restarted without FABRIC_MODE_RESTART=1, or
  // deactivated behind our back): the containers on it have no NVLink until it is active again.
  for (uint32_t id : ledger_.Held()) {
    if (Contains(active, id)) continue;
    spdlog::error(
        "fabric partition {} is held but the fabric manager reports it inactive; "
        "activating it again",
        id);
    if (auto done = ActivateOnFabricLocked(id); !done) {
      stats_.activation_failures++;
      spdlog::error("fabric partition {}: {}", id, done.error().message);
    } else {
      stats_.activations++;
    }
  }
  std::vector<uint32_t> still;
  for (uint32_t id : pending_deactivation_) {
    if (!Contains(active, id) || Contains(ledger_.Held(), id)) continue;
    if (auto fabric_now = ConnectedLocked(); fabric_now && (*fabric_now)->Deactivate(id)) {
      stats_.deactivations++;
      spdlog::info("fabric partition {} deactivated on retry", id);
    } else {
      still.push_back(id);
    }
  }
  pending_deactivation_ = std::move(still);
}

std::optional<uint32_t> PartitionActivator::HeldBy(const std::string& holder) const {
  std::lock_guard lock(mu_);
  return ledger_.HeldBy(holder);
}

std::vector<std::string> PartitionActivator::Holders() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (const auto& [holder, id] : ledger_.holders())
    out.push_back(holder);
  return out;
}

bool PartitionActivator::HoldsAnyOf(const std::vector<std::string>& pci_addresses) const {
  std::lock_guard lock(mu_);
  const topology::PartitionTable& table = options_.table;
  std::vector<int> modules;
  for (const auto& [module, address] : table.pci_addresses) {
    if (std::find(pci_addresses.begin(), pci_addresses.end(), address) != pci_addresses.end())
      modules.push_back(module);
  }
  auto touches = [&](uint32_t id) {
    const topology::FabricPartition* partition = table.Find(id);
    return partition != nullptr &&
           std::any_of(partition->modules.begin(), partition->modules.end(), [&](int module) {
             return std::find(modules.begin(), modules.end(), module) != modules.end();
           });
  };
  const std::vector<uint32_t> held = ledger_.Held();
  return std::any_of(held.begin(), held.end(), touches) ||
         std::any_of(pending_deactivation_.begin(), pending_deactivation_.end(), touches);
}

ActivatorStats PartitionActivator::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

const topology::PartitionTable& PartitionActivator::table() const {
  return options_.table;
}

std::string PartitionActivator::Describe() const {
  std::lock_guard lock(mu_);
  return fabric_ ? fabric_->Describe() : "fabric manager (not connected)";
}

std::string PartitionActivator::MetricsText() const {
  ActivatorStats s = stats();
  auto counter = [](std::string& out, const char* name, const char* help, const std::string& type,
                    const std::string& samples) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" +
           samples;
  };
  std::string out;
  counter(out, "tessera_fabric_manager_restarts_total",
          "Fabric-manager restarts noticed; each time the active partition list was sent again.",
          "counter", "tessera_fabric_manager_restarts_total " + std::to_string(s.restarts) + "\n");
  counter(out, "tessera_fabric_partition_activations_total", "NVLink fabric partitions activated.",
          "counter",
          "tessera_fabric_partition_activations_total " + std::to_string(s.activations) + "\n");
  counter(out, "tessera_fabric_partition_deactivations_total",
          "NVLink fabric partitions deactivated.", "counter",
          "tessera_fabric_partition_deactivations_total " + std::to_string(s.deactivations) + "\n");
  counter(out, "tessera_fabric_partition_failures_total",
          "Activations refused, and deactivations given up (retried by the watch).", "counter",
          "tessera_fabric_partition_failures_total{operation=\"activate\"} " +
              std::to_string(s.activation_failures) +
              "\ntessera_fabric_partition_failures_total{operation=\"deactivate\"} " +
              std::to_string(s.deactivation_failures) + "\n");
  counter(out, "tessera_fabric_partitions_held", "NVLink fabric partitions held now.", "gauge",
          "tessera_fabric_partitions_held " + std::to_string(s.active) + "\n");
  return out;
}

}  // namespace tessera::fabricmanager

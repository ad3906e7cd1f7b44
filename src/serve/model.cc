#include "serve/model.h"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "serve/queue.h"

namespace tessera::serve {

using fleet::ContainerRecord;
using fleet::ContainerState;
using fleet::GpuRecord;
using fleet::LeaseState;
using fleet::Mutation;

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
  out.push_back(gpu);
}

void Model::SetContainerState(ContainerRecord& container, ContainerState state) {
  container_counts[static_cast<int>(container.state)]--;
  container.state = state;
  container_counts[static_cast<int>(state)]++;
}

void Model::ReleaseGpus(ContainerRecord& container, std::vector<Mutation>& out) {
  if (container.spec.mig.count > 0 && container.started && !container.mig_devices.empty())
    AddMigUse(container.spec.tenancy, -container.mig_gpus);
  for (const auto& id : container.gpus) {
    auto* gpu = FindGpu(id);
    if (!gpu) continue;
    if (container.spec.mig.count > 0) {
      ReleaseMigSlices(*gpu, container, out);
      continue;
    }
    if (gpu->container_id != container.id) continue;
    if (gpu->state == LeaseState::kReserved || gpu->state == LeaseState::kActive) {
      SetGpuState(*gpu, LeaseState::kReleasing, "", out);
      to_check.push_back(id);
    }
  }
  checker_wake.notify_one();
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
  for (const auto& slice : gpu.mig_slices) {
    if (slice.container_id.empty()) continue;
    // Other slices still run: the lease stays, named after one of their holders.
    if (gpu.container_id == container.id) {
      gpu.container_id = slice.container_id;
      gpu.tenancy = slice.tenancy;
      lease_dirty_ = true;
      out.push_back(gpu);
    }
    return;
  }
  // The last slice: the whole GPU is checked, the check following this holder.
  gpu.container_id = container.id;
  gpu.tenancy = container.spec.tenancy;
  SetGpuState(gpu, LeaseState::kReleasing, "", out);
  to_check.push_back(gpu.id());
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
}

void Model::EnqueueMig(const ContainerRecord& container) {
  mig_pending.push_back(container.id);
  ++mig_waiting[container.spec.tenancy];
}

void Model::MigLeftWaiting(const ContainerRecord& container) {
  auto it = mig_waiting.find(container.spec.tenancy);
  if (it == mig_waiting.end()) return;
  if (--it->second <= 0) mig_waiting.erase(it);
}

int Model::MigPendingOf(const std::string& tenancy) const {
  auto it = mig_waiting.find(tenancy);
  return it == mig_waiting.end() ? 0 : it->second;
}

void Model::FinishContainer(ContainerRecord& container, const backends::ExitInfo& info,
                            std::vector<Mutation>& out) {
  if (fleet::IsTerminal(container.state)) return;
  if (container.spec.mig.count > 0 && container.state == ContainerState::kPending &&
      !container.started)
    MigLeftWaiting(container);
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
  container.finished_ms = fleet::NowMs();
  if (queue) {
    const auto request = RequestIdOf(container.id);
    queue->Cancel(request);
    queue->Finished(request, static_cast<double>(container.finished_ms) / 1000.0);
  }
  if (auto it = waiting_index.find(container.id); it != waiting_index.end()) {
    waiting[it->second].reason.clear();  // gone from the queue; the next pass drops the entry
    waiting_index.erase(it);
  }
  spdlog::info("container {}: {}{}{}", container.id, fleet::ContainerStateName(container.state),
               container.exit_code ? " with code " + std::to_string(*container.exit_code) : "",
               container.reason.empty() ? "" : ": " + container.reason);
  ReleaseGpus(container, out);
  out.push_back(container);
  // What a node agent measured (Kubernetes mode: the GpuLease's status.measured) comes with the
  // exit; this host's telemetry has been adding to the record all along.
  if (info.measured) {
    const fleet::MeasuredUsage mine = container.measured.value_or(fleet::MeasuredUsage{});
    container.measured =
        fleet::MeasuredUsage{std::max(mine.sm_seconds, info.measured->sm_seconds),
                             std::max(mine.memory_gib_seconds, info.measured->memory_gib_seconds),
                             std::max(mine.energy_joules, info.measured->energy_joules)};
  }
  std::string gpu_model;
  if (!container.gpus.empty())
    if (const auto* gpu = FindGpu(container.gpus.front())) gpu_model = gpu->model;
  // Metered in the same commit that releases its GPUs: billing and leases cannot disagree.
  if (auto usage = UsageOf(container, gpu_model); usage.gpus > 0) {
    meter.Add(usage);
    out.push_back(std::move(usage));
  }
}

void Model::AddContainer(ContainerRecord container) {
  container_counts[static_cast<int>(container.state)]++;
  if (!container.idempotency_key.empty())
    idempotency[container.tenancy_uid + '\n' + container.idempotency_key] = container.id;
  container_position[container.id] = container_order.size();
  container_order.push_back(container.id);
  std::string id = container.id;
  containers.emplace(std::move(id), std::move(container));
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
  store.Commit(std::move(mutations), std::move(done));
}

void Model::WriteLeaseFile() {
  lease_dirty_ = false;
  if (options.lease_file.empty()) return;
  // Format shared with the device plugin, which reports checking/quarantined/draining GPUs as
  // Unhealthy: {"version":1,"gpus":{"<PCI address>":{"state","reason","tenancy"}}}.
  nlohmann::json doc = {{"version", 1}, {"gpus", nlohmann::json::object()}};
  for (const auto& gpu : gpus) {
    if (!gpu.node.empty()) continue;  // other nodes' lease files are written by their agents
    doc["gpus"][gpu.pci_address] = {{"state", fleet::LeaseStateName(gpu.state)},
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

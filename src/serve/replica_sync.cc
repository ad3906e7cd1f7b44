#include "serve/replica_sync.h"

#include <spdlog/spdlog.h>

#include "serve/queue.h"

namespace tessera::serve {

using fleet::ContainerRecord;
using fleet::ContainerState;
using fleet::Mutation;

// One overload per Mutation alternative; the deleted template makes a new alternative fail to
// compile here until replicas apply it.
struct ReplicaSync::Visitor {
  ReplicaSync& sync;
  Model& model;
  std::vector<Mutation>& out;

  void operator()(const fleet::Tenancy& tenancy) {
    auto it = model.tenancies.find(tenancy.name);
    if (it != model.tenancies.end() && it->second.uid != tenancy.uid) ForgetIncarnation(it->second);
    model.tenancies[tenancy.name] = tenancy;
    if (model.queue) (void)model.queue->SetTenancy(tenancy.uid, PolicyOf(tenancy));
  }

  void operator()(const fleet::TokenRecord& token) {
    // A flushed last-used time never moves this replica's own later one back.
    auto it = model.tokens.find(token.sha256);
    const int64_t used = it == model.tokens.end() ? 0 : it->second.last_used_ms;
    auto& ours = model.tokens[token.sha256] = token;
    ours.last_used_ms = std::max(used, token.last_used_ms);
  }

  void operator()(const fleet::TokenDeletion& deletion) {
    std::erase_if(model.tokens, [&](const auto& entry) { return entry.second.id == deletion.id; });
  }

  void operator()(const fleet::TenancyDeletion& deletion) {
    auto it = model.tenancies.find(deletion.name);
    if (it == model.tenancies.end()) return;
    ForgetIncarnation(it->second);
    model.tenancies.erase(it);
  }

  void operator()(const fleet::GpuRecord& theirs) {
    fleet::GpuRecord* gpu = model.FindGpu(theirs.id());
    if (!gpu) {
      // Its node has not published it to this replica yet: kept, not placed until it does.
      fleet::GpuRecord added = theirs;
      added.available = false;
      model.gpus.push_back(std::move(added));
      model.MarkLeasesChanged();
      return;
    }
    gpu->state = theirs.state;
    gpu->reason = theirs.reason;
    gpu->tenancy = theirs.tenancy;
    gpu->container_id = theirs.container_id;
    gpu->drain_requested = theirs.drain_requested;
    gpu->quarantine_requested = theirs.quarantine_requested;
    gpu->firmware_baseline = theirs.firmware_baseline;
    gpu->updated_ms = theirs.updated_ms;
    model.MarkLeasesChanged();
    model.reschedule = true;
  }

  void operator()(const ContainerRecord& theirs) {
    auto it = model.containers.find(theirs.id);
    if (it == model.containers.end()) {
      model.AddContainer(theirs);
      auto& added = model.containers.at(theirs.id);
      if (added.state == ContainerState::kPending && !added.started) {
        if (added.stop_requested) {
          model.FinishContainer(
              added, backends::ExitInfo{std::nullopt, true, "deleted before it started"}, out);
        } else if (added.spec.gpus > 0 && model.queue) {
          // GPU containers wait in the policy's queue, as where they were submitted.
          if (auto queued = model.queue->Enqueue(PendingRequestOf(added)); !queued)
            spdlog::error("container {}: {}", added.id, queued.error().message);
          model.reschedule = true;
        } else {
          model.pending.push_back(added.id);
          model.reschedule = true;
        }
      }
      return;
    }
    ContainerRecord& ours = it->second;
    const bool stop_was_requested = ours.stop_requested;
    ContainerRecord merged = sync.Leading() ? fleet::MergeContainerRecords(ours, theirs) : theirs;
    merged.stop_requested = ours.stop_requested || theirs.stop_requested;
    if (merged == ours) return;
    const bool was_waiting = ours.state == ContainerState::kPending && !ours.started;
    const bool was_terminal = fleet::IsTerminal(ours.state);
    const bool was_running = ours.state == ContainerState::kRunning;
    model.SetContainerState(ours, merged.state);
    ours = std::move(merged);
    if (!was_running && ours.state == ContainerState::kRunning) model.MeterStarted(ours);
    // The queue follows what the leader did: a container it started or ended waits no longer,
    // and one that ended no longer counts as running (for when this replica leads again).
    if (model.queue && ours.spec.gpus > 0) {
      const auto request = RequestIdOf(ours.id);
      if (was_waiting && (ours.started || fleet::IsTerminal(ours.state)))
        model.queue->Cancel(request);
      if (!was_terminal && fleet::IsTerminal(ours.state))
        model.queue->Finished(request, static_cast<double>(ours.finished_ms) / 1000.0);
    }
    if (!ours.stop_requested || stop_was_requested || fleet::IsTerminal(ours.state)) return;
    // A stop another replica took: ended here when it never started, else stopped by the
    // scheduler (which runs where this replica leads).
    if (!ours.started) {
      model.FinishContainer(
          ours, backends::ExitInfo{std::nullopt, true, "deleted before it started"}, out);
    } else if (ours.state == ContainerState::kRunning) {
      model.to_stop.push_back(ours.id);
    }
  }

  void operator()(const fleet::ContainerDeletion& deletion) {
    if (deletion.tombstone) model.retired_ids.insert(deletion.id);
    model.RemoveContainer(deletion.id);
  }

  // Another replica's metering (the leader's, written when a container ended).
  void operator()(const fleet::UsageRecord& usage) { model.meter.Add(usage); }
  // Telemetry cursors are this host's own (embedded mode), never another replica's.
  void operator()(const fleet::TelemetryCursor&) {}
  // The audit trail is read from the store by queries, never held in the model.
  void operator()(const fleet::AuditRecord&) {}

  template <typename T>
  void operator()(const T&) = delete;

  // A deleted incarnation's keys and tokens go with it (as Tenancies::Delete does).
  void ForgetIncarnation(const fleet::Tenancy& tenancy) {
    const std::string prefix = tenancy.uid + '\n';
    std::erase_if(model.idempotency,
                  [&prefix](const auto& entry) { return entry.first.starts_with(prefix); });
    for (auto it = model.tokens.begin(); it != model.tokens.end();)
      it = it->second.tenancy_uid == tenancy.uid ? model.tokens.erase(it) : std::next(it);
  }
};

void ReplicaSync::Apply(const Mutation& change) {
  std::lock_guard lock(model_.mu);
  std::vector<Mutation> out;
  std::visit(Visitor{*this, model_, out}, change);
  model_.QueueChanged();
  if (!out.empty()) model_.Commit(std::move(out), nullptr);
  model_.scheduler_wake.notify_one();
  model_.checker_wake.notify_one();
  model_.idle.notify_all();
}

}  // namespace tessera::serve

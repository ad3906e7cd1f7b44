#include "serve/submissions.h"

#include <algorithm>

#include "serve/queue.h"

namespace tessera::serve {

using fleet::ContainerRecord;
using fleet::ContainerState;
using fleet::Mutation;

namespace {

// A pending GPU container's place and why it waits, from the last scheduling pass (mu held).
void FillQueuePlace(const Model& model, ContainerRecord& container) {
  if (container.state != ContainerState::kPending) return;
  auto it = model.waiting_index.find(container.id);
  if (it == model.waiting_index.end()) return;
  container.queue_position = model.waiting[it->second].position;
  container.reason = model.waiting[it->second].reason;
}

}  // namespace

void Submissions::Submit(const Caller& caller, fleet::ContainerSpec spec,
                         std::string idempotency_key, Done<SubmitResult> done) {
  if (auto problem = fleet::CheckTenancyName(spec.tenancy); !problem.empty())
    return done(InvalidArgument("tenancy: \"" + spec.tenancy + "\" " + problem));
  if (!caller.admin && caller.tenancy != spec.tenancy)
    return done(NotFound("tenancy " + spec.tenancy + " not found"));
  if (spec.gpus < 0 || spec.gpus > fleet::kMaxGpusPerContainer)
    return done(InvalidArgument("gpus: must be 0.." + std::to_string(fleet::kMaxGpusPerContainer)));
  const bool mig = spec.mig.count > 0;
  if (mig) {
    // The API's parser checked these already; a submission from elsewhere is held to them too.
    if (spec.gpus > 0) return done(InvalidArgument("mig: asks for MIG slices instead of gpus"));
    if (spec.isolation != fleet::Isolation::kRunc)
      return done(InvalidArgument("mig: MIG slices run with isolation runc only"));
    if (spec.mig.count > fleet::kMaxMigSlicesPerContainer ||
        !fleet::CheckMigProfileName(spec.mig.profile).empty())
      return done(InvalidArgument("mig: not a valid MIG request"));
    if (auto status = gpus_.CheckMigRequest(spec.mig); !status) return done(status.error());
  }
  if (spec.gpus > 0) {
    if (auto status = gpus_.CheckRequest(spec.gpus); !status) return done(status.error());
  }
  const bool share = spec.share.has_value();
  if (share) {
    if (spec.gpus > 0 || mig)
      return done(InvalidArgument("share: asks for a share of one GPU instead of gpus or mig"));
    if (auto status = sharing::CheckShare(*spec.share); !status)
      return done(status.error().WithContext("share"));
    if (auto status = backend_.CheckShare(spec.isolation); !status) return done(status.error());
    if (auto status = gpus_.CheckShareRequest(*spec.share); !status) return done(status.error());
  }
  if (auto status = backend_.CheckIsolation(spec.isolation, mig || share ? 1 : spec.gpus); !status)
    return done(status.error());
  auto random = fleet::RandomHex(8);
  if (!random) return done(random.error());

  std::lock_guard lock(model_.mu);
  auto tenancy_it = model_.tenancies.find(spec.tenancy);
  // A token outliving its incarnation (deleted while this request was under way) acts for none.
  if (!caller.admin && (tenancy_it == model_.tenancies.end() || !caller.Sees(tenancy_it->second)))
    return done(NotFound("tenancy " + spec.tenancy + " not found"));
  if (!spec.volumes.empty()) {
    // 403 naming the volume for anything the tenancy is not entitled to (the backend resolves
    // again at start, in case the entitlement is withdrawn in between).
    auto resolved = tenancy::ResolveVolumes(spec.tenancy,
                                            tenancy_it == model_.tenancies.end()
                                                ? tenancy::StorageEntitlements{}
                                                : Model::StorageOf(tenancy_it->second),
                                            spec.volumes);
    if (!resolved) return done(resolved.error());
  }
  // Keys are scoped to the incarnation; a tenancy the admin's submission creates has none yet.
  if (!idempotency_key.empty() && tenancy_it != model_.tenancies.end()) {
    auto it = model_.idempotency.find(tenancy_it->second.uid + '\n' + idempotency_key);
    if (it != model_.idempotency.end()) {
      const auto& existing = model_.containers.at(it->second);
      if (existing.spec != spec)
        return done(AlreadyExists("Idempotency-Key \"" + idempotency_key +
                                  "\" was used for a different request (container " + existing.id +
                                  ")"));
      // The first submission may still be in flight: answer after it is durable too.
      model_.store.Commit({}, [done = std::move(done), existing](Status status) {
        if (!status) return done(status.error());
        done(SubmitResult{existing, true});
      });
      return;
    }
  }
  // GPU containers join the queue: the priority within the tenancy's bound, and the pending
  // quota checked under the lock, so concurrent submissions cannot pass it together.
  const bool queued = spec.gpus > 0 && model_.queue;
  if ((queued || mig || share) && model_.queue) {
    const auto policy = model_.queue->GetTenancy(spec.tenancy);
    if (spec.priority > policy.max_priority)
      return done(PermissionDenied("priority: " + std::to_string(spec.priority) +
                                   " is above tenancy " + spec.tenancy + "'s maxPriority " +
                                   std::to_string(policy.max_priority)));
    // MIG and share requests wait beside the queue; the pending quota counts them all.
    const int beside = model_.MigPendingOf(spec.tenancy) + model_.SharePendingOf(spec.tenancy);
    if (beside > 0 || mig || share) {
      const int pending = beside + model_.queue->PendingOf(spec.tenancy);
      if (pending >= policy.quota_pending)
        return done(FailedPrecondition(std::string(kQuotaRefusal) + std::to_string(pending) + "/" +
                                       std::to_string(policy.quota_pending) + " requests pending"));
    }
    if (queued) {
      if (auto status = model_.queue->CheckSubmit(PendingRequestOf(spec, "", fleet::NowMs()));
          !status)
        return done(status.error());
    }
  }
  std::vector<Mutation> mutations;
  auto tenancy = model_.EnsureTenancy(spec.tenancy, mutations);
  if (!tenancy) return done(tenancy.error());
  ContainerRecord container;
  // With a key the ID is derived from it: replicas that take the same retried request at once
  // write the same record.
  container.id = idempotency_key.empty()
                     ? "c-" + *random
                     : fleet::IdempotentContainerId((*tenancy)->uid, idempotency_key);
  if (model_.containers.count(container.id))
    return done(AlreadyExists("Idempotency-Key \"" + idempotency_key +
                              "\" was used before (container " + container.id + ")"));
  container.spec = std::move(spec);
  container.tenancy_uid = (*tenancy)->uid;
  container.idempotency_key = std::move(idempotency_key);
  container.created_ms = fleet::NowMs();
  mutations.push_back(container);
  if (queued) {
    if (auto status = model_.queue->Enqueue(PendingRequestOf(container)); !status)
      return done(status.error());
  } else if (mig) {
    model_.EnqueueMig(container);
  } else if (share) {
    model_.EnqueueShare(container);
  } else {
    model_.pending.push_back(container.id);
  }
  model_.reschedule = true;
  model_.AddContainer(container);
  model_.Commit(std::move(mutations),
                [done = std::move(done), container = std::move(container)](Status status) {
                  if (!status) return done(status.error());
                  done(SubmitResult{container, false});
                });
  model_.scheduler_wake.notify_one();
}

Result<ContainerRecord> Submissions::Get(const Caller& caller, const std::string& id) const {
  std::lock_guard lock(model_.mu);
  auto it = model_.containers.find(id);
  if (it == model_.containers.end() || !caller.Sees(it->second))
    return NotFound("container " + id + " not found");
  ContainerRecord copy = it->second;
  FillQueuePlace(model_, copy);
  return copy;
}

Result<ContainerPage> Submissions::List(const Caller& caller, const ContainerQuery& query) const {
  std::lock_guard lock(model_.mu);
  const size_t count = model_.container_order.size();
  // Walk positions 0..count-1 in the requested direction, starting after the cursor.
  size_t step = 0;
  if (!query.after.empty()) {
    auto at = model_.container_position.find(query.after);
    if (at == model_.container_position.end() || !caller.Sees(model_.containers.at(query.after)))
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
    const auto& container = model_.containers.at(model_.container_order[position]);
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
    FillQueuePlace(model_, page.containers.back());
  }
  return page;
}

void Submissions::Delete(const Caller& caller, const std::string& id, Done<ContainerRecord> done) {
  std::lock_guard lock(model_.mu);
  auto it = model_.containers.find(id);
  if (it == model_.containers.end() || !caller.Sees(it->second))
    return done(NotFound("container " + id + " not found"));
  auto& container = it->second;
  std::vector<Mutation> mutations;
  if (!fleet::IsTerminal(container.state) && !container.stop_requested) {
    container.stop_requested = true;
    if (!container.started) {
      model_.FinishContainer(container,
                             backends::ExitInfo{std::nullopt, true, "deleted before it started"},
                             mutations);
    } else {
      mutations.push_back(container);
      if (container.state == ContainerState::kRunning) model_.to_stop.push_back(container.id);
      model_.scheduler_wake.notify_one();
    }
  }
  model_.Commit(std::move(mutations), [done = std::move(done), container](Status status) {
    if (!status) return done(status.error());
    done(container);
  });
}

QueueView Submissions::Queue(const Caller& caller) const {
  std::lock_guard lock(model_.mu);
  QueueView view;
  view.mode = scheduling::ModeName(model_.queue->options().mode);
  for (const auto& entry : model_.waiting) {
    // Entries that left the queue since the pass (started elsewhere, deleted) are gone.
    if (!model_.waiting_index.count(entry.id)) continue;
    if (!caller.admin && (caller.tenancy_uid.empty() || entry.tenancy_uid != caller.tenancy_uid))
      continue;
    if (view.total++ < QueueView::kMaxEntries) view.entries.push_back(entry);
  }
  for (const auto& usage : model_.queue->Usage()) {
    auto tenancy = model_.tenancies.find(usage.name);
    if (tenancy == model_.tenancies.end() || !caller.Sees(tenancy->second)) continue;
    TenancyShare share;
    share.name = usage.name;
    share.policy = model_.queue->GetTenancy(usage.name);
    share.gpus_in_use = usage.in_use;
    share.mig_gpus_in_use = usage.other_gpus;
    share.pending = usage.pending;
    share.share = usage.share;
    share.target = usage.target;
    view.tenancies.push_back(std::move(share));
  }
  return view;
}

Result<std::string> Submissions::Logs(const Caller& caller, const std::string& id) {
  {
    std::lock_guard lock(model_.mu);
    auto it = model_.containers.find(id);
    if (it == model_.containers.end() || !caller.Sees(it->second))
      return NotFound("container " + id + " not found");
    if (!it->second.started) return std::string();
  }
  auto logs = backend_.Logs(id);
  if (!logs && logs.error().category == ErrorCategory::kNotFound) return std::string();
  return logs;
}

}  // namespace tessera::serve

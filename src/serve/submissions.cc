#include "serve/submissions.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <unordered_map>

#include "serve/audit.h"
#include "serve/queue.h"
#include "serve/scheduler.h"

namespace tessera::serve {

using fleet::ContainerRecord;
using fleet::ContainerState;
using fleet::Mutation;

namespace {

// The reason `caller` is shown: another tenancy's reservation only as such.
std::string ReasonFor(const Caller& caller, const QueueEntry& entry) {
  if (entry.reserved_for_uid.empty() || caller.admin ||
      (!caller.tenancy_uid.empty() && entry.reserved_for_uid == caller.tenancy_uid))
    return entry.reason;
  return kReservedForAnother;
}

// A pending GPU container's place and why it waits, from the last queue report (mu held).
void FillQueuePlace(const Caller& caller, const Model::QueueReport* report,
                    ContainerRecord& container) {
  if (!report || container.state != ContainerState::kPending || container.started) return;
  auto it = report->index.find(container.id);
  if (it == report->index.end()) return;
  container.queue_position = report->entries[it->second].position;
  container.reason = ReasonFor(caller, report->entries[it->second]);
}

}  // namespace

void Submissions::Submit(const Caller& caller, fleet::ContainerSpec spec,
                         std::string idempotency_key, Done<SubmitResult> done) {
  if (auto status = CheckSpec(caller, spec); !status) return done(status.error());
  auto random = fleet::RandomHex(8);
  if (!random) return done(random.error());

  std::unique_lock lock(model_.mu);
  if (auto refused = model_.WriteRefusal(); !refused) return done(refused.error());
  auto tenancy_it = model_.tenancies.find(spec.tenancy);
  const fleet::Tenancy* known =
      tenancy_it == model_.tenancies.end() ? nullptr : &tenancy_it->second;
  if (auto status = CheckTenancyLocked(caller, spec, known); !status) return done(status.error());
  if (AnswerRepeatLocked(caller, spec, idempotency_key, known, done)) return;
  // The queue's key of the tenancy; one this submission creates has nothing queued and the
  // default policy ("" is no key of the queue's).
  if (auto status = CheckPendingLocked(spec, known ? known->uid : ""); !status)
    return done(status.error());
  std::vector<Mutation> mutations;
  auto tenancy = model_.EnsureTenancy(spec.tenancy, mutations);
  if (!tenancy) return done(tenancy.error());
  const std::string uid = (*tenancy)->uid;
  ContainerRecord container;
  container.id = NewContainerIdLocked(uid, idempotency_key, *random);
  if (model_.containers.count(container.id))
    return done(AlreadyExists("Idempotency-Key \"" + idempotency_key +
                              "\" was used before (container " + container.id + ")"));
  container.spec = std::move(spec);
  container.tenancy_uid = uid;
  container.idempotency_key = std::move(idempotency_key);
  container.created_ms = fleet::NowMs();
  mutations.push_back(container);
  // A tenancy this creates (the admin's submission) is said in the record.
  mutations.push_back(
      AuditOf(caller, {"container.create", "container", container.id, container.spec.tenancy}, "ok",
              mutations.size() > 1 ? "created the tenancy" : ""));
  model_.AddContainer(container);
  // Nothing acts on it before its record is durable: it joins the queue (or starts) from the
  // commit's callback, and leaves the model again if the commit fails.
  ++model_.unconfirmed[uid];
  model_.Commit(std::move(mutations),
                [this, done = std::move(done), container = std::move(container)](
                    Status status) mutable { Settle(std::move(container), status, done); });
}

Status Submissions::CheckSpec(const Caller& caller, const fleet::ContainerSpec& spec) const {
  if (auto problem = fleet::CheckTenancyName(spec.tenancy); !problem.empty())
    return InvalidArgument("tenancy: \"" + spec.tenancy + "\" " + problem);
  if (!caller.admin && caller.tenancy != spec.tenancy)
    return NotFound("tenancy " + spec.tenancy + " not found");
  if (spec.gpus < 0 || spec.gpus > fleet::kMaxGpusPerContainer)
    return InvalidArgument("gpus: must be 0.." + std::to_string(fleet::kMaxGpusPerContainer));
  const bool mig = spec.mig.count > 0;
  if (mig) {
    // The API's parser checked these already; a submission from elsewhere is held to them too.
    if (spec.gpus > 0) return InvalidArgument("mig: asks for MIG slices instead of gpus");
    if (spec.isolation != fleet::Isolation::kRunc)
      return InvalidArgument("mig: MIG slices run with isolation runc only");
    if (spec.mig.count > fleet::kMaxMigSlicesPerContainer ||
        !fleet::CheckMigProfileName(spec.mig.profile).empty())
      return InvalidArgument("mig: not a valid MIG request");
    if (auto status = gpus_.CheckMigRequest(spec.mig); !status) return status.error();
  }
  if (spec.gpus > 0) {
    if (auto status = gpus_.CheckRequest(spec.gpus); !status) return status.error();
  }
  const bool share = spec.share.has_value();
  if (share) {
    if (spec.gpus > 0 || mig)
      return InvalidArgument("share: asks for a share of one GPU instead of gpus or mig");
    if (auto status = sharing::CheckShare(*spec.share); !status)
      return status.error().WithContext("share");
    if (auto status = backend_.CheckShare(spec.isolation); !status) return status.error();
    if (auto status = gpus_.CheckShareRequest(*spec.share); !status) return status.error();
  }
  if (auto status = backend_.CheckIsolation(spec.isolation, mig || share ? 1 : spec.gpus); !status)
    return status.error();
  return Ok();
}

Status Submissions::CheckTenancyLocked(const Caller& caller, const fleet::ContainerSpec& spec,
                                       const fleet::Tenancy* known) const {
  // A token outliving its incarnation (deleted while this request was under way) acts for none.
  if (!caller.admin && (!known || !caller.Sees(*known)))
    return NotFound("tenancy " + spec.tenancy + " not found");
  if (!spec.volumes.empty()) {
    // 403 naming the volume for anything the tenancy is not entitled to (the backend resolves
    // again at start, in case the entitlement is withdrawn in between).
    auto resolved = tenancy::ResolveVolumes(
        spec.tenancy, known ? Model::StorageOf(*known) : tenancy::StorageEntitlements{},
        spec.volumes);
    if (!resolved) return resolved.error();
  }
  return Ok();
}

bool Submissions::AnswerRepeatLocked(const Caller& caller, const fleet::ContainerSpec& spec,
                                     const std::string& idempotency_key,
                                     const fleet::Tenancy* known, Done<SubmitResult>& done) {
  // Keys are scoped to the incarnation; a tenancy the admin's submission creates has none yet.
  if (idempotency_key.empty() || !known) return false;
  auto it = model_.idempotency.find(known->uid + '\n' + idempotency_key);
  if (it == model_.idempotency.end()) return false;
  const auto& existing = model_.containers.at(it->second);
  if (existing.spec != spec) {
    done(AlreadyExists("Idempotency-Key \"" + idempotency_key +
                       "\" was used for a different request (container " + existing.id + ")"));
    return true;
  }
  // The first submission may still be in flight: answer after it is durable too (and not
  // at all as accepted when it failed and was taken back).
  // Not a change, yet a request: its record says it was answered with the earlier one.
  model_.store.Commit({AuditOf(caller, {"container.create", "container", existing.id, spec.tenancy},
                               "ok", "replayed (Idempotency-Key)")},
                      [this, done = std::move(done), id = existing.id](Status status) {
                        if (!status) return done(status.error());
                        std::unique_lock lock(model_.mu);
                        auto found = model_.containers.find(id);
                        if (found == model_.containers.end()) {
                          lock.unlock();
                          return done(Unavailable("container " + id + " was not recorded"));
                        }
                        SubmitResult result{found->second, true};
                        lock.unlock();
                        done(std::move(result));
                      });
  return true;
}

Status Submissions::CheckPendingLocked(const fleet::ContainerSpec& spec,
                                       const std::string& uid) const {
  const bool mig = spec.mig.count > 0;
  const bool share = spec.share.has_value();
  const bool queued = spec.gpus > 0 && model_.queue;
  // GPU containers join the queue (MIG and share requests wait beside it): the priority within
  // the tenancy's bound, and the pending quota (the default one unless its policy sets another)
  // checked under the lock, counting submissions not yet durable, so concurrent submissions
  // cannot pass it together.
  if (!(queued || mig || share) || !model_.queue) return Ok();
  const auto policy = model_.queue->GetTenancy(uid);
  if (spec.priority > policy.max_priority)
    return PermissionDenied("priority: " + std::to_string(spec.priority) + " is above tenancy " +
                            spec.tenancy + "'s maxPriority " + std::to_string(policy.max_priority));
  auto unconfirmed = model_.unconfirmed.find(uid);
  const int pending = model_.queue->PendingOf(uid) + model_.MigPendingOf(uid) +
                      model_.SharePendingOf(uid) +
                      (unconfirmed == model_.unconfirmed.end() ? 0 : unconfirmed->second);
  const int quota = model_.queue->PendingQuotaOf(uid);
  if (pending >= quota)
    return FailedPrecondition(std::string(kQuotaRefusal) + std::to_string(pending) + "/" +
                              std::to_string(quota) + " requests pending");
  if (queued) {
    auto request = PendingRequestOf(spec, "", fleet::NowMs());
    request.tenancy = uid;
    if (auto status = model_.queue->CheckSubmit(request); !status) return status.error();
  }
  return Ok();
}

std::string Submissions::NewContainerIdLocked(const std::string& uid,
                                              const std::string& idempotency_key,
                                              const std::string& random) const {
  // With a key the ID is derived from it: replicas that take the same retried request at once
  // write the same record. An ID retention retired is never given again: the key's next
  // generation is.
  if (idempotency_key.empty()) return "c-" + random;
  for (uint32_t generation = 0;; ++generation) {
    auto id = fleet::IdempotentContainerId(uid, idempotency_key, generation);
    if (!model_.retired_ids.count(id)) return id;
  }
}

void Submissions::Settle(ContainerRecord container, const Status& status,
                         const Done<SubmitResult>& done) {
  std::unique_lock lock(model_.mu);
  if (auto it = model_.unconfirmed.find(container.tenancy_uid);
      it != model_.unconfirmed.end() && --it->second <= 0)
    model_.unconfirmed.erase(it);
  auto found = model_.containers.find(container.id);
  if (!status) {
    // Never acknowledged, never run: gone from memory as from the store.
    if (found != model_.containers.end() && !found->second.started) {
      model_.RemoveContainer(container.id);
      model_.unsaved.containers.erase(container.id);
      // Its record goes too: the refusal is recorded in its place.
      std::erase_if(model_.unsaved.audit, [&container](const fleet::AuditRecord& record) {
        return record.object_id == container.id && record.action == "container.create";
      });
    }
    lock.unlock();
    return done(status.error());
  }
  if (found != model_.containers.end()) Admit(found->second);
  lock.unlock();
  done(SubmitResult{std::move(container), false});
}

Result<std::string> Submissions::ResubmitLocked(const ContainerRecord& stopped,
                                                std::vector<Mutation>& out) {
  auto random = fleet::RandomHex(8);
  if (!random) return random.error();
  ContainerRecord container;
  container.id = "c-" + *random;
  container.spec = stopped.spec;
  container.tenancy_uid = stopped.tenancy_uid;
  container.created_ms = fleet::NowMs();
  out.push_back(container);
  out.push_back(
      ServiceAudit({"container.create", "container", container.id, container.spec.tenancy},
                   "queued again: a GPU fault stopped " + stopped.id));
  std::string id = container.id;
  model_.AddContainer(std::move(container));
  return id;
}

void Submissions::AdmitResubmitted(const std::vector<std::string>& ids) {
  std::lock_guard lock(model_.mu);
  for (const auto& id : ids)
    if (auto it = model_.containers.find(id); it != model_.containers.end()) Admit(it->second);
}

void Submissions::Admit(const ContainerRecord& container) {
  // Deleted before its record was durable: it ended already.
  if (container.state != ContainerState::kPending || container.started) return;
  bool changed = true;
  if (container.spec.gpus > 0 && model_.queue) {
    auto request = PendingRequestOf(container);
    if (auto status = model_.queue->Enqueue(std::move(request)); !status) {
      spdlog::error("container {}: {}", container.id, status.error().message);
      return;
    }
    // Only a request that could start, reserve or reorder something is a reason for a pass;
    // one more request behind a full queue is not.
    changed = model_.queue->CouldChangeAPass(RequestIdOf(container.id));
  } else if (container.spec.mig.count > 0) {
    model_.EnqueueMig(container);
    // With MIG by demand the pass asks for the instance it needs.
    changed = gpus_.MigSlicesFreeLocked(container.spec.mig.profile) || model_.options.mig_shaper;
  } else if (container.spec.share) {
    model_.EnqueueShare(container);
    // With MIG by demand the pass asks for the slice a share of a MIG slice needs.
    changed = ShareMightStartLocked(model_, container) ||
              (model_.options.mig_shaper && !container.spec.share->mig_profile.empty());
  } else {
    model_.pending.push_back(container.id);
  }
  model_.QueueChanged();
  if (changed) {
    model_.reschedule = true;
    model_.scheduler_wake.notify_one();
  }
}

Result<ContainerRecord> Submissions::Get(const Caller& caller, const std::string& id) const {
  std::lock_guard lock(model_.mu);
  auto it = model_.containers.find(id);
  if (it == model_.containers.end() || !caller.Sees(it->second))
    return NotFound("container " + id + " not found");
  ContainerRecord copy = it->second;
  auto report = model_.ReadQueueReport();
  FillQueuePlace(caller, report.get(), copy);
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
  auto report = model_.ReadQueueReport();
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
    FillQueuePlace(caller, report.get(), page.containers.back());
  }
  return page;
}

void Submissions::Delete(const Caller& caller, const std::string& id, Done<ContainerRecord> done) {
  std::lock_guard lock(model_.mu);
  auto it = model_.containers.find(id);
  if (it == model_.containers.end() || !caller.Sees(it->second))
    return done(NotFound("container " + id + " not found"));
  if (auto refused = model_.WriteRefusal(); !refused) return done(refused.error());
  auto& container = it->second;
  std::vector<Mutation> mutations;
  if (!fleet::IsTerminal(container.state) && !container.stop_requested) {
    container.stop_requested = true;
    if (!container.started) {
      model_.FinishContainer(container,
                             backends::ExitInfo{std::nullopt, true, "deleted before it started"},
                             mutations, /*audited=*/false);
    } else {
      mutations.push_back(container);
      if (container.state == ContainerState::kRunning) model_.to_stop.push_back(container.id);
      model_.scheduler_wake.notify_one();
    }
  }
  // A repeated DELETE changes nothing, yet is recorded as the request it is.
  mutations.push_back(AuditOf(caller, {"container.delete", "container", id, container.spec.tenancy},
                              "ok", fleet::ContainerStateName(container.state)));
  model_.Commit(std::move(mutations), [done = std::move(done), container](Status status) {
    if (!status) return done(status.error());
    done(container);
  });
}

QueueView Submissions::Queue(const Caller& caller) const {
  std::lock_guard lock(model_.mu);
  QueueView view;
  view.mode = scheduling::ModeName(model_.queue->options().mode);
  // How many wait now (not as of the report): the whole queue, or the tenant's own.
  const std::string own = caller.admin ? "" : caller.tenancy_uid;
  if (caller.admin) {
    view.total = model_.queue->pending_count();
    for (const auto& [uid, count] : model_.mig_waiting)
      view.total += static_cast<size_t>(count);
    for (const auto& [uid, count] : model_.share_waiting)
      view.total += static_cast<size_t>(count);
  } else if (!own.empty()) {
    view.total = static_cast<size_t>(model_.queue->PendingOf(own) + model_.MigPendingOf(own) +
                                     model_.SharePendingOf(own));
  }
  // The first entries the caller sees, from the last report: the whole queue's in order, or the
  // tenant's own (their positions stay global). Entries that left the queue since (started,
  // deleted) are passed over.
  if (auto report = model_.ReadQueueReport(); report && (caller.admin || !own.empty())) {
    auto take = [&](const QueueEntry& entry) {
      auto container = model_.containers.find(entry.id);
      if (container == model_.containers.end() ||
          container->second.state != ContainerState::kPending || container->second.started)
        return;
      view.entries.push_back(entry);
      view.entries.back().reason = ReasonFor(caller, entry);
    };
    if (caller.admin) {
      for (size_t i = 0; i < report->entries.size() && view.entries.size() < QueueView::kMaxEntries;
           ++i)
        take(report->entries[i]);
    } else if (auto mine = report->by_tenancy.find(own); mine != report->by_tenancy.end()) {
      for (size_t i = 0; i < mine->second.size() && view.entries.size() < QueueView::kMaxEntries;
           ++i)
        take(report->entries[mine->second[i]]);
    }
  }
  // The queue knows tenancies by incarnation; only those that exist are shown, by name.
  std::unordered_map<std::string, const fleet::Tenancy*> by_uid;
  for (const auto& [name, tenancy] : model_.tenancies)
    by_uid[tenancy.uid] = &tenancy;
  for (const auto& usage : model_.queue->Usage()) {
    auto tenancy = by_uid.find(usage.name);
    if (tenancy == by_uid.end() || !caller.Sees(*tenancy->second)) continue;
    TenancyShare share;
    share.name = tenancy->second->name;
    share.policy = model_.queue->GetTenancy(usage.name);
    share.policy.quota_pending = model_.queue->PendingQuotaOf(usage.name);
    share.gpus_in_use = usage.in_use;
    share.mig_gpus_in_use = usage.other_gpus;
    share.pending = usage.pending;
    share.share = usage.share;
    share.target = usage.target;
    view.tenancies.push_back(std::move(share));
  }
  return view;
}

Result<backends::LogPart> Submissions::LogsFrom(const Caller& caller, const std::string& id,
                                                uint64_t offset) {
  backends::LogPart nothing;  // nothing printed yet: an offset past 0 lies past the end
  nothing.cut = offset > 0;
  {
    std::lock_guard lock(model_.mu);
    auto it = model_.containers.find(id);
    if (it == model_.containers.end() || !caller.Sees(it->second))
      return NotFound("container " + id + " not found");
    if (!it->second.started) return nothing;
  }
  auto part = backend_.LogsFrom(id, offset);
  if (!part && part.error().category == ErrorCategory::kNotFound) return nothing;
  return part;
}

}  // namespace tessera::serve

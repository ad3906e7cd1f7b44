#include "serve/submissions.h"

#include <algorithm>

namespace tessera::serve {

using fleet::ContainerRecord;
using fleet::ContainerState;
using fleet::Mutation;

void Submissions::Submit(const Caller& caller, fleet::ContainerSpec spec,
                         std::string idempotency_key, Done<SubmitResult> done) {
  if (auto problem = fleet::CheckTenancyName(spec.tenancy); !problem.empty())
    return done(InvalidArgument("tenancy: \"" + spec.tenancy + "\" " + problem));
  if (!caller.admin && caller.tenancy != spec.tenancy)
    return done(NotFound("tenancy " + spec.tenancy + " not found"));
  if (spec.gpus < 0 || spec.gpus > fleet::kMaxGpusPerContainer)
    return done(InvalidArgument("gpus: must be 0.." + std::to_string(fleet::kMaxGpusPerContainer)));
  if (spec.gpus > 0) {
    if (auto status = gpus_.CheckRequest(spec.gpus); !status) return done(status.error());
  }
  if (auto status = backend_.CheckIsolation(spec.isolation, spec.gpus); !status)
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
  model_.pending.push_back(container.id);
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
  return it->second;
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

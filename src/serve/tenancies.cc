#include "serve/tenancies.h"

#include <algorithm>
#include <future>

#include "serve/audit.h"
#include "serve/metering.h"
#include "serve/queue.h"

namespace tessera::serve {

using fleet::Mutation;

void Tenancies::Put(const Caller& caller, fleet::Tenancy tenancy, Done<fleet::Tenancy> done) {
  if (auto problem = fleet::CheckTenancyName(tenancy.name); !problem.empty())
    return done(InvalidArgument("tenancy name \"" + tenancy.name + "\": " + problem));
  // Labels and extensions are the admin's metadata about a tenancy, and entitlements live in the
  // extensions: a tenant writing them would grant itself access.
  if (!caller.admin)
    return done(PermissionDenied(
        "only the admin creates or changes tenancies: labels and extensions are admin metadata"));
  auto uid = fleet::RandomHex(8);
  if (!uid) return done(uid.error());
  std::unique_lock lock(model_.mu);
  if (auto refused = model_.WriteRefusal(); !refused) return done(refused.error());
  auto it = model_.tenancies.find(tenancy.name);
  const std::string storage_key(tenancy::kStorageExtension);
  if (auto storage = tenancy.extensions.find(storage_key); storage != tenancy.extensions.end()) {
    auto parsed = tenancy::ParseStorageEntitlements(storage->second);
    if (!parsed) return done(parsed.error().WithContext("extensions.storage"));
    storage->second = tenancy::StorageEntitlementsToJson(*parsed);
  }
  const bool created = it == model_.tenancies.end();
  if (!created) {
    tenancy.created_ms = it->second.created_ms;
    tenancy.uid = it->second.uid;
    // Entitlements other components attached stay unless the body replaces them.
    for (const auto& [key, value] : it->second.extensions)
      tenancy.extensions.emplace(key, value);
  } else {
    tenancy.created_ms = fleet::NowMs();
    tenancy.uid = std::move(*uid);
  }
  model_.tenancies[tenancy.name] = tenancy;
  if (model_.queue) {
    // Validated by the API when it was set; a record that fails here gets the defaults.
    (void)model_.queue->SetTenancy(tenancy.uid, PolicyOf(tenancy));
    model_.reschedule = true;
    model_.QueueChanged();
    model_.scheduler_wake.notify_one();
  }
  model_.Commit({tenancy, AuditOf(caller, {"tenancy.put", "tenancy", tenancy.name, tenancy.name},
                                  "ok", created ? "created" : "updated")},
                [done = std::move(done), tenancy](Status status) {
                  if (!status) return done(status.error());
                  done(tenancy);
                });
}

Result<fleet::Tenancy> Tenancies::Get(const Caller& caller, const std::string& name) const {
  std::lock_guard lock(model_.mu);
  auto it = model_.tenancies.find(name);
  if (it == model_.tenancies.end() || !caller.Sees(it->second))
    return NotFound("tenancy " + name + " not found");
  return it->second;
}

std::vector<fleet::Tenancy> Tenancies::List(const Caller& caller) const {
  std::lock_guard lock(model_.mu);
  std::vector<fleet::Tenancy> out;
  for (const auto& [name, tenancy] : model_.tenancies)
    if (caller.Sees(tenancy)) out.push_back(tenancy);
  return out;
}
void Tenancies::PutStorage(const Caller& caller, const std::string& name,
                           tenancy::StorageEntitlements storage,
                           Done<tenancy::StorageEntitlements> done) {
  if (auto problem = fleet::CheckTenancyName(name); !problem.empty())
    return done(InvalidArgument("tenancy name \"" + name + "\": " + problem));
  if (!caller.admin) return done(PermissionDenied("only the admin sets storage entitlements"));
  std::unique_lock lock(model_.mu);
  if (auto refused = model_.WriteRefusal(); !refused) return done(refused.error());
  std::vector<Mutation> mutations;
  auto ensured = model_.EnsureTenancy(name, mutations);
  if (!ensured) return done(ensured.error());
  fleet::Tenancy tenancy = **ensured;
  tenancy.extensions[std::string(tenancy::kStorageExtension)] =
      tenancy::StorageEntitlementsToJson(storage);
  model_.tenancies[name] = tenancy;
  // A tenancy this creates is said in the record: it has no tenancy.put of its own.
  model_.Commit({tenancy, AuditOf(caller, {"storage.put", "storage", name, name}, "ok",
                                  mutations.empty() ? "" : "created the tenancy")},
                [done = std::move(done), storage = std::move(storage)](Status status) {
                  if (!status) return done(status.error());
                  done(storage);
                });
}

Result<tenancy::StorageEntitlements> Tenancies::GetStorage(const Caller& caller,
                                                           const std::string& name) const {
  std::lock_guard lock(model_.mu);
  auto it = model_.tenancies.find(name);
  if (it == model_.tenancies.end() || !caller.Sees(it->second))
    return NotFound("tenancy " + name + " not found");
  return Model::StorageOf(it->second);
}

Result<UsageReport> Tenancies::Usage(const Caller& caller, const std::string& name,
                                     const UsageQuery& query) const {
  const int64_t now_ms = fleet::NowMs();
  const int64_t from_ms = query.from_s * 1000;
  const int64_t to_ms = query.to_s ? *query.to_s * 1000 : now_ms;
  if (from_ms > to_ms)
    return InvalidArgument("query parameter from: " + std::to_string(query.from_s) +
                           " is after to (" + std::to_string(to_ms / 1000) +
                           (query.to_s ? ")" : ", now)"));
  if (query.step_s > 0) {
    const int64_t step_ms = query.step_s * 1000;
    if ((to_ms - from_ms + step_ms - 1) / step_ms > static_cast<int64_t>(UsageQuery::kMaxBuckets))
      return InvalidArgument("query parameter step: more than " +
                             std::to_string(UsageQuery::kMaxBuckets) +
                             " buckets in the window (give from)");
  }
  // Who may see what, under the model's lock; the report itself from the meter, without it.
  std::vector<std::string> uids;
  {
    std::lock_guard lock(model_.mu);
    auto it = model_.tenancies.find(name);
    const bool known = it != model_.tenancies.end();
    if (!caller.admin && (!known || !caller.Sees(it->second)))
      return NotFound("tenancy " + name + " not found");
    if (caller.admin) {
      // The admin: every incarnation the name had, its history included.
      uids = model_.meter.IncarnationsOf(name);
      if (known && std::find(uids.begin(), uids.end(), it->second.uid) == uids.end())
        uids.push_back(it->second.uid);
    } else {
      uids.push_back(caller.tenancy_uid);
    }
    if (!known && uids.empty()) return NotFound("tenancy " + name + " not found");
  }
  UsageReport report = model_.meter.Report(uids, from_ms, to_ms, now_ms, query.step_s * 1000);
  report.tenancy = name;
  return report;
}

Status Tenancies::Prepare(const std::string& name) {
  tenancy::StorageEntitlements storage;
  {
    std::lock_guard lock(model_.mu);
    auto it = model_.tenancies.find(name);
    if (it == model_.tenancies.end()) return NotFound("tenancy " + name + " not found");
    storage = Model::StorageOf(it->second);
  }
  return backend_.PrepareTenancy(name, storage);
}

Status Tenancies::Delete(const Caller& caller, const std::string& name) {
  if (!caller.admin) return PermissionDenied("only the admin deletes tenancies");
  // Every container of the tenancy must have ended; returns the ended ones.
  auto ended_containers = [this, &name]() -> Result<std::vector<std::string>> {
    std::vector<std::string> ended;
    for (const auto& [id, container] : model_.containers) {
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
    std::lock_guard lock(model_.mu);
    if (!model_.tenancies.count(name)) return NotFound("tenancy " + name + " not found");
    if (auto refused = model_.WriteRefusal(); !refused) return refused;
    auto listed = ended_containers();
    if (!listed) return listed.error();
    ended = std::move(*listed);
  }
  // podman keeps ended containers (for their logs), and they would keep the network in use.
  for (const auto& id : ended) {
    auto removed = backend_.Remove(id);
    if (!removed && removed.error().category != ErrorCategory::kNotFound) return removed;
  }
  if (auto released = backend_.ReleaseTenancy(name); !released) return released;
  std::promise<Status> committed;
  {
    std::lock_guard lock(model_.mu);
    // A submission may have come in while the backend worked: it keeps the tenancy.
    if (auto listed = ended_containers(); !listed) return listed.error();
    // Its records stay as the admin's history; its keys go, so a later owner of the name is
    // never answered with them.
    auto tenancy = model_.tenancies.find(name);
    if (tenancy == model_.tenancies.end()) return NotFound("tenancy " + name + " not found");
    const std::string prefix = tenancy->second.uid + '\n';
    std::erase_if(model_.idempotency,
                  [&prefix](const auto& entry) { return entry.first.starts_with(prefix); });
    model_.tenancies.erase(tenancy);
    // A later owner of the name is another incarnation: the queue knows it by its own uid and
    // starts it from the defaults, with no recent usage.
    for (auto it = model_.tokens.begin(); it != model_.tokens.end();)
      it = it->second.tenancy == name ? model_.tokens.erase(it) : std::next(it);
    model_.Commit(
        {fleet::TenancyDeletion{name}, AuditOf(caller, {"tenancy.delete", "tenancy", name, name})},
        [&committed](Status status) { committed.set_value(std::move(status)); });
  }
  return committed.get_future().get();
}

}  // namespace tessera::serve

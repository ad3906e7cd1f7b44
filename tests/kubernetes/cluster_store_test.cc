// The cluster store against the scripted API server: every record kind goes to its object and
// loads back; a second replica hears of the first one's writes through its watches; a conflict
// (409 on a stale resourceVersion) is merged so that neither replica's change is lost; a replica
// that does not lead writes no container status and no GPU record; and two replicas that create
// the same idempotent container end with one object. The audit trail: a commit's records are
// ConfigMaps written before its change (a record that cannot be written fails the commit
// unmade), read back a page at a time with the query's filters, and deleted by retention once
// old.
#include "backends/kubernetes/cluster_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>

#include "backends/kubernetes/audit_objects.h"
#include "backends/kubernetes/state_objects.h"
#include "kubernetes/fake_apiserver.h"
#include "support/wait.h"

namespace tessera::testing {
namespace {

using fleet::ContainerRecord;
using fleet::ContainerState;
using k8s::Json;
using k8s::Resource;

constexpr const char* kNamespace = "tessera-system";

// The changes a store reports, as they came.
class Changes {
 public:
  void Add(const fleet::Mutation& change) {
    std::lock_guard lock(mu_);
    changes_.push_back(change);
  }
  template <typename T>
  std::vector<T> Of() {
    std::lock_guard lock(mu_);
    std::vector<T> out;
    for (const auto& change : changes_)
      if (auto* value = std::get_if<T>(&change)) out.push_back(*value);
    return out;
  }

 private:
  std::mutex mu_;
  std::vector<fleet::Mutation> changes_;
};

class ClusterStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_.server = api_.url();
    admin_ = std::make_unique<k8s::Client>(config_);
  }

  std::unique_ptr<k8s::ClusterStore> Open(std::function<bool()> leading = nullptr) {
    k8s::ClusterStoreOptions options;
    options.client = config_;
    options.ns = kNamespace;
    options.leading = std::move(leading);
    return k8s::ClusterStore::Open(std::move(options));
  }

  static fleet::Tenancy Tenancy(const std::string& name, const std::string& uid) {
    fleet::Tenancy tenancy;
    tenancy.name = name;
    tenancy.uid = uid;
    tenancy.created_ms = 1763900000000;
    tenancy.labels = {{"team", "vision"}};
    return tenancy;
  }

  static ContainerRecord Container(const std::string& id, const std::string& uid) {
    ContainerRecord container;
    container.id = id;
    container.spec.image = "cuda";
    container.spec.tenancy = "team-a";
    container.spec.gpus = 1;
    container.tenancy_uid = uid;
    container.created_ms = 1763900000500;
    return container;
  }

  static fleet::GpuRecord Gpu(const std::string& pci, fleet::LeaseState state) {
    fleet::GpuRecord gpu;
    gpu.node = "gpu-node-1";
    gpu.pci_address = pci;
    gpu.model = "H100";
    gpu.cdi_device = "nvidia.com/gpu=" + pci;
    gpu.state = state;
    gpu.updated_ms = 1763900000600;
    return gpu;
  }

  static fleet::AuditRecord Audit(int64_t time_ms, const std::string& tenancy,
                                  const std::string& action) {
    fleet::AuditRecord record;
    record.time_ms = time_ms;
    record.token_id = "admin";
    record.scope = "admin";
    record.action = action;
    record.object_kind = "tenancy";
    record.object_id = tenancy;
    record.tenancy = tenancy;
    record.result = "ok";
    record.request_id = "r-" + std::to_string(time_ms);
    return record;
  }

  std::vector<std::string> AuditNames() {
    auto list = admin_->List(Resource::ConfigMaps(), kNamespace, "tessera.dev/audit=record");
    EXPECT_TRUE(list.ok());
    std::vector<std::string> names;
    if (list.ok())
      for (const auto& item : (*list)["items"])
        names.push_back(item["metadata"]["name"]);
    return names;
  }

  FakeApiServer api_;
  k8s::ClientConfig config_;
  std::unique_ptr<k8s::Client> admin_;
};

TEST_F(ClusterStoreTest, EveryRecordKindIsAnObjectAndLoadsBack) {
  auto store = Open();
  fleet::TokenRecord token{"t-0011aabb", std::string(64, 'a'), "team-a", 1763900000700, "uid-1"};
  ContainerRecord running = Container("c-00000000000000aa", "uid-1");
  running.state = ContainerState::kRunning;
  running.started = true;
  running.gpus = {"0000:18:00.0@gpu-node-1"};
  running.started_ms = 1763900001000;
  fleet::UsageRecord usage{"c-00000000000000a9", "team-a",     "uid-1", 2,
                           1763900000800,        1763900060800};
  ASSERT_TRUE(store
                  ->CommitAndWait({Tenancy("team-a", "uid-1"), token, running,
                                   Gpu("0000:18:00.0", fleet::LeaseState::kActive),
                                   Gpu("0000:2a:00.0", fleet::LeaseState::kQuarantined), usage})
                  .ok());
  EXPECT_TRUE(
      admin_
          ->Get(Resource::ConfigMaps(), kNamespace,
                "tessera-usage-" + usage.container_id + "-" + std::to_string(usage.started_ms))
          .ok());
  EXPECT_TRUE(admin_->Get(Resource::Tenancies(), "", "team-a").ok());
  EXPECT_TRUE(admin_->Get(Resource::Secrets(), kNamespace, "tessera-token-0011aabb").ok());
  auto object = admin_->Get(Resource::GpuContainers(), "", running.id);
  ASSERT_TRUE(object.ok());
  EXPECT_EQ((*object)["status"]["state"], "running");
  auto gpus = admin_->Get(Resource::ConfigMaps(), kNamespace, "tessera-gpus-gpu-node-1");
  ASSERT_TRUE(gpus.ok());
  EXPECT_EQ((*gpus)["data"].size(), 2u);

  auto fresh = Open();
  auto loaded = fresh->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  ASSERT_EQ(loaded->tenancies.size(), 1u);
  EXPECT_EQ(loaded->tenancies[0], Tenancy("team-a", "uid-1"));
  ASSERT_EQ(loaded->tokens.size(), 1u);
  EXPECT_EQ(loaded->tokens[0], token);
  ASSERT_EQ(loaded->containers.size(), 1u);
  EXPECT_EQ(loaded->containers[0], running);
  ASSERT_EQ(loaded->gpus.size(), 2u);
  EXPECT_EQ(loaded->gpus[0].state, fleet::LeaseState::kActive);
  EXPECT_EQ(loaded->gpus[1].state, fleet::LeaseState::kQuarantined);
  ASSERT_EQ(loaded->usage.size(), 1u);
  EXPECT_EQ(loaded->usage[0], usage);

  // Deletions: the tenancy takes its token Secrets along; the container goes.
  ASSERT_TRUE(
      store->CommitAndWait({fleet::TenancyDeletion{"team-a"}, fleet::ContainerDeletion{running.id}})
          .ok());
  EXPECT_FALSE(admin_->Get(Resource::Tenancies(), "", "team-a").ok());
  EXPECT_FALSE(admin_->Get(Resource::Secrets(), kNamespace, "tessera-token-0011aabb").ok());
  EXPECT_FALSE(admin_->Get(Resource::GpuContainers(), "", running.id).ok());
  // Billing outlives both.
  auto billed = Open()->Load();
  ASSERT_TRUE(billed.ok()) << billed.error().message;
  ASSERT_EQ(billed->usage.size(), 1u);
  EXPECT_EQ(billed->usage[0], usage);
}

TEST_F(ClusterStoreTest, AReplicaHearsTheOtherOnesWritesAndNotItsOwn) {
  Changes heard_by_a, heard_by_b;  // outlive the stores that report into them
  auto a = Open();
  auto b = Open();
  a->Follow([&](const fleet::Mutation& change) { heard_by_a.Add(change); });
  b->Follow([&](const fleet::Mutation& change) { heard_by_b.Add(change); });
  ASSERT_TRUE(WaitUntil([&] { return a->Synced() && b->Synced(); }));
  ASSERT_TRUE(
      a->CommitAndWait({Tenancy("team-a", "uid-1"), Container("c-00000000000000bb", "uid-1")})
          .ok());
  ASSERT_TRUE(WaitUntil([&] {
    return heard_by_b.Of<ContainerRecord>().size() == 1 &&
           heard_by_b.Of<fleet::Tenancy>().size() == 1;
  }));
  EXPECT_EQ(heard_by_b.Of<ContainerRecord>()[0], Container("c-00000000000000bb", "uid-1"));
  // Metering the leader wrote reaches the other replica once (its meter must not count twice).
  fleet::UsageRecord usage{"c-00000000000000b0", "team-a",     "uid-1", 1,
                           1763900000800,        1763900001800};
  ASSERT_TRUE(a->CommitAndWait({usage}).ok());
  ASSERT_TRUE(WaitUntil([&] { return heard_by_b.Of<fleet::UsageRecord>().size() == 1; }));
  EXPECT_EQ(heard_by_b.Of<fleet::UsageRecord>()[0], usage);
  ASSERT_TRUE(a->CommitAndWait({fleet::ContainerDeletion{"c-00000000000000bb"}}).ok());
  ASSERT_TRUE(WaitUntil([&] { return heard_by_b.Of<fleet::ContainerDeletion>().size() == 1; }));
  // A replica's own writes come back through its watch, and are not reported to it.
  ASSERT_TRUE(b->CommitAndWait({}).ok());
  EXPECT_TRUE(heard_by_a.Of<ContainerRecord>().empty());
  EXPECT_TRUE(heard_by_a.Of<fleet::ContainerDeletion>().empty());
  EXPECT_TRUE(heard_by_a.Of<fleet::UsageRecord>().empty());
  EXPECT_EQ(heard_by_b.Of<fleet::UsageRecord>().size(), 1u);
}

TEST_F(ClusterStoreTest, ARevokedTokensSecretGoesAndEveryReplicaHearsIt) {
  Changes heard_by_b;
  auto a = Open();
  auto b = Open();
  b->Follow([&](const fleet::Mutation& change) { heard_by_b.Add(change); });
  ASSERT_TRUE(WaitUntil([&] { return b->Synced(); }));
  fleet::TokenRecord metrics{"t-00c0ffee",
                             std::string(64, 'c'),
                             "",
                             1763900000700,
                             "",
                             fleet::TokenScope::kMetrics,
                             1763990000000,
                             0};
  ASSERT_TRUE(a->CommitAndWait({metrics}).ok());
  ASSERT_TRUE(WaitUntil([&] { return heard_by_b.Of<fleet::TokenRecord>().size() == 1; }));
  EXPECT_EQ(heard_by_b.Of<fleet::TokenRecord>()[0], metrics);
  ASSERT_TRUE(a->CommitAndWait({fleet::TokenDeletion{metrics.id}}).ok());
  EXPECT_FALSE(admin_->Get(Resource::Secrets(), kNamespace, "tessera-token-00c0ffee").ok());
  ASSERT_TRUE(WaitUntil([&] { return heard_by_b.Of<fleet::TokenDeletion>().size() == 1; }));
  EXPECT_EQ(heard_by_b.Of<fleet::TokenDeletion>()[0].id, metrics.id);
  // Revoking one that is gone already is no error (a retry).
  EXPECT_TRUE(a->CommitAndWait({fleet::TokenDeletion{metrics.id}}).ok());
}

TEST_F(ClusterStoreTest, AStopRequestAndTheLeadersStatusWrittenAtOnceAreBothKept) {
  auto follower = Open([] { return false; });
  ContainerRecord pending = Container("c-00000000000000cc", "uid-1");
  ASSERT_TRUE(follower->CommitAndWait({pending}).ok());
  // The leader read it (resourceVersion 1); the follower's stop request then lands (2); the
  // leader's status write still carries 1: 409, read again, merged.
  auto leader = Open();
  ASSERT_TRUE(leader->Load().ok());
  ContainerRecord stop = pending;
  stop.stop_requested = true;
  ASSERT_TRUE(follower->CommitAndWait({stop}).ok());
  api_.ClearLog();
  ContainerRecord placed = pending;
  placed.state = ContainerState::kRunning;
  placed.started = true;
  placed.gpus = {"0000:18:00.0@gpu-node-1"};
  ASSERT_TRUE(leader->CommitAndWait({placed}).ok());
  auto object = admin_->Get(Resource::GpuContainers(), "", pending.id);
  ASSERT_TRUE(object.ok());
  auto live = k8s::ContainerRecordOf(*object);
  ASSERT_TRUE(live.ok());
  EXPECT_TRUE(live->stop_requested);
  EXPECT_EQ(live->state, ContainerState::kRunning);
  EXPECT_TRUE(live->started);
  EXPECT_EQ(live->gpus, placed.gpus);
  size_t status_writes = 0;
  for (const auto& entry : api_.Log())
    if (entry["method"] == "PUT" && entry["path"].get<std::string>().ends_with("/status"))
      ++status_writes;
  EXPECT_EQ(status_writes, 2u) << "the first status write should have met a 409";
}

TEST_F(ClusterStoreTest, AFollowerWritesNoStatusAndNoGpuRecord) {
  Changes heard;
  auto follower = Open([] { return false; });
  ContainerRecord pending = Container("c-00000000000000dd", "uid-1");
  ASSERT_TRUE(follower->CommitAndWait({pending}).ok());
  ContainerRecord failed = pending;
  failed.state = ContainerState::kFailed;
  failed.reason = "not this replica's to say";
  ASSERT_TRUE(follower->CommitAndWait({failed}).ok());
  auto object = admin_->Get(Resource::GpuContainers(), "", pending.id);
  ASSERT_TRUE(object.ok());
  EXPECT_EQ((*object).value("status", Json::object()).value("state", "pending"), "pending");
  follower->Follow([&](const fleet::Mutation& change) { heard.Add(change); });
  auto refused = follower->CommitAndWait({Gpu("0000:18:00.0", fleet::LeaseState::kDraining)});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().category, ErrorCategory::kFailedPrecondition);
  EXPECT_FALSE(admin_->Get(Resource::ConfigMaps(), kNamespace, "tessera-gpus-gpu-node-1").ok());
  // Its model, which took the operator's change already, hears the live record again.
  auto restored = heard.Of<fleet::GpuRecord>();
  ASSERT_EQ(restored.size(), 1u);
  EXPECT_EQ(restored[0].state, fleet::LeaseState::kFree);
}

TEST_F(ClusterStoreTest, TwoReplicasCreatingOneIdempotentContainerMakeOneObject) {
  Changes heard_by_b;
  auto a = Open();
  auto b = Open();
  const std::string id = fleet::IdempotentContainerId("uid-1", "nightly-7");
  ContainerRecord first = Container(id, "uid-1");
  first.idempotency_key = "nightly-7";
  ASSERT_TRUE(a->CommitAndWait({first}).ok());
  // b never heard of it (no watch) and creates it too: AlreadyExists is the same container.
  b->Follow([&](const fleet::Mutation& change) { heard_by_b.Add(change); });
  ASSERT_TRUE(b->CommitAndWait({first}).ok());
  auto list = admin_->List(Resource::GpuContainers(), "");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ((*list)["items"].size(), 1u);
}

TEST_F(ClusterStoreTest, TheAdminTokenHashIsCreatedOnceUnlessReplaced) {
  auto store = Open();
  auto none = store->AdminTokenHash();
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  ASSERT_TRUE(store->PutAdminTokenHash(std::string(64, 'a'), false).ok());
  auto second = store->PutAdminTokenHash(std::string(64, 'b'), false);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.error().category, ErrorCategory::kAlreadyExists);
  EXPECT_EQ(**store->AdminTokenHash(), std::string(64, 'a'));
  ASSERT_TRUE(store->PutAdminTokenHash(std::string(64, 'b'), true).ok());
  EXPECT_EQ(**store->AdminTokenHash(), std::string(64, 'b'));
}

TEST_F(ClusterStoreTest, AnAuditRecordIsWrittenBeforeItsChangeAndOnlyOnce) {
  auto store = Open();
  const fleet::AuditRecord record = Audit(1763900001000, "team-a", "tenancy.put");
  api_.ClearLog();
  ASSERT_TRUE(store->CommitAndWait({Tenancy("team-a", "uid-1"), record}).ok());
  // The request log: the record's ConfigMap is created before the Tenancy, though it came after
  // it in the commit.
  std::vector<std::string> creates;
  for (const auto& entry : api_.Log())
    if (entry["method"] == "POST") creates.push_back(entry["path"]);
  ASSERT_EQ(creates.size(), 2u);
  EXPECT_TRUE(creates[0].ends_with("/namespaces/tessera-system/configmaps")) << creates[0];
  EXPECT_TRUE(creates[1].ends_with("/tenancies")) << creates[1];
  const std::string name = k8s::AuditConfigMapName(k8s::AuditSeqOf(record));
  EXPECT_TRUE(name.starts_with("tessera-audit-1763900001000")) << name;
  auto object = admin_->Get(Resource::ConfigMaps(), kNamespace, name);
  ASSERT_TRUE(object.ok());
  EXPECT_EQ((*object)["metadata"]["labels"]["tessera.dev/audit-tenancy"], "team-a");
  EXPECT_EQ((*object)["metadata"]["labels"]["tessera.dev/audit-action"], "tenancy.put");
  // The same commit written again (a retry after a later write failed) adds no second record.
  ASSERT_TRUE(store->CommitAndWait({record}).ok());
  EXPECT_EQ(AuditNames().size(), 1u);
  // Nor do the records enter the model.
  auto loaded = Open()->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_EQ(loaded->tenancies.size(), 1u);
}

TEST_F(ClusterStoreTest, ARecordThatCannotBeWrittenFailsItsCommitUnmade) {
  auto store = Open();
  api_.Script({{{"method", "POST"},
                {"path", "/namespaces/tessera-system/configmaps$"},
                {"status", 403},
                {"reason", "Forbidden"},
                {"times", 1}}});
  auto failed =
      store->CommitAndWait({Tenancy("team-a", "uid-1"), Audit(1763900001000, "team-a", "x.y")});
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.error().message.find("audit record"), std::string::npos)
      << failed.error().message;
  EXPECT_FALSE(admin_->Get(Resource::Tenancies(), "", "team-a").ok());
  EXPECT_TRUE(AuditNames().empty());
}

TEST_F(ClusterStoreTest, TheTrailIsReadInPagesWithItsFiltersAndRetentionTakesTheOldOnly) {
  auto store = Open();
  std::vector<fleet::Mutation> records;
  for (int i = 0; i < 7; ++i)
    records.push_back(Audit(1763900000000 + i * 1000, i % 2 ? "team-b" : "team-a",
                            i % 3 ? "container.create" : "tenancy.put"));
  // A tenancy name no label may hold is selected by its hash and compared whole.
  fleet::AuditRecord odd = Audit(1763900009000, std::string(80, 'z') + "/..", "container.create");
  records.push_back(odd);
  ASSERT_TRUE(store->CommitAndWait(records).ok());

  std::vector<int64_t> times;
  fleet::AuditQuery query;
  query.limit = 3;
  int pages = 0;
  do {
    auto page = store->QueryAudit(query);
    ASSERT_TRUE(page.ok()) << page.error().message;
    ASSERT_LE(page->entries.size(), 3u);
    for (const auto& entry : page->entries)
      times.push_back(entry.record.time_ms);
    query.after = page->next;
    ++pages;
  } while (query.after != 0 && pages < 10);
  EXPECT_EQ(pages, 3);
  ASSERT_EQ(times.size(), 8u);
  EXPECT_TRUE(std::is_sorted(times.begin(), times.end()));

  fleet::AuditQuery filtered;
  filtered.tenancy = "team-a";
  filtered.action = "container.create";
  auto page = store->QueryAudit(filtered);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->entries.size(), 2u);  // i = 2, 4
  EXPECT_EQ(page->entries[0].record, std::get<fleet::AuditRecord>(records[2]));
  EXPECT_EQ(page->entries[1].record.time_ms, 1763900004000);
  fleet::AuditQuery by_time;
  by_time.from_ms = 1763900002000;
  by_time.to_ms = 1763900004000;
  page = store->QueryAudit(by_time);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->entries.size(), 2u);
  EXPECT_EQ(page->entries[0].record.time_ms, 1763900002000);
  fleet::AuditQuery by_odd;
  by_odd.tenancy = odd.tenancy;
  page = store->QueryAudit(by_odd);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->entries.size(), 1u);
  EXPECT_EQ(page->entries[0].record, odd);

  // Retention: in batches of at most `limit`, only what is older than the bound.
  auto first = store->ExpireAudit(1763900004500, 3);
  ASSERT_TRUE(first.ok()) << first.error().message;
  EXPECT_EQ(*first, 3u);
  auto second = store->ExpireAudit(1763900004500, 3);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(*second, 2u);
  EXPECT_EQ(*store->ExpireAudit(1763900004500, 3), 0u);
  auto kept = store->QueryAudit({});
  ASSERT_TRUE(kept.ok());
  ASSERT_EQ(kept->entries.size(), 3u);
  EXPECT_EQ(kept->entries[0].record.time_ms, 1763900005000);
  EXPECT_EQ(kept->next, 0);
}

}  // namespace
}  // namespace tessera::testing

// The cluster store against the scripted API server: every record kind goes to its object and
// loads back; a second replica hears of the first one's writes through its watches; a conflict
// (409 on a stale resourceVersion) is merged so that neither replica's change is lost; a replica
// that does not lead writes no container status and no GPU record; and two replicas that create
// the same idempotent container end with one object.
#include "backends/kubernetes/cluster_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>

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

}  // namespace
}  // namespace tessera::testing

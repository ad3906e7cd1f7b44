// The leader elector against the scripted API server: it creates the coordination.k8s.io/v1
// Lease, renews it, leaves it alone while another identity holds it, takes it over once its
// holder stops renewing (leaseTransitions counts the handover), and steps down on a 409.
#include "kubernetes/leader_election.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>

#include "kubernetes/fake_apiserver.h"
#include "kubernetes/plain_config.h"
#include "support/wait.h"

namespace tessera::k8s {
namespace {

using testing::FakeApiServer;

ClientConfig Plain(const FakeApiServer& server) {
  ClientConfig config = testing::PlainConfig(server);
  config.timeout = std::chrono::milliseconds(5000);
  config.retry.max_attempts = 1;
  return config;
}

LeaderElectionOptions Short(const std::string& identity) {
  LeaderElectionOptions options;
  options.ns = "tessera-system";
  options.identity = identity;
  options.lease_duration = std::chrono::seconds(2);
  options.renew_deadline = std::chrono::milliseconds(1500);
  options.retry_period = std::chrono::milliseconds(200);
  return options;
}

Json ReadLease(const FakeApiServer& server) {
  Client client(Plain(server));
  auto lease = client.Get(Resource::Leases(), "tessera-system", "tessera-control-plane");
  return lease ? *lease : Json();
}

TEST(KubernetesLeaderElection, RejectsDeadlinesThatOutlastTheLease) {
  auto options = Short("a");
  options.renew_deadline = options.lease_duration;
  EXPECT_FALSE(CheckLeaderElectionOptions(options).ok());
  options = Short("a");
  options.retry_period = options.renew_deadline;
  EXPECT_FALSE(CheckLeaderElectionOptions(options).ok());
  options = Short("");
  EXPECT_FALSE(CheckLeaderElectionOptions(options).ok());
  EXPECT_TRUE(CheckLeaderElectionOptions(Short("a")).ok());
}

TEST(KubernetesLeaderElection, CreatesTheLeaseAndRenewsIt) {
  FakeApiServer server;
  std::atomic<int> started{0};
  LeaderElector elector(
      Plain(server), Short("replica-a"), [&] { ++started; }, nullptr);
  ASSERT_TRUE(testing::WaitUntil([&] { return elector.IsLeader(); }));
  EXPECT_EQ(started.load(), 1);
  Json lease = ReadLease(server);
  ASSERT_TRUE(lease.is_object());
  EXPECT_EQ(lease["kind"], "Lease");
  EXPECT_EQ(lease["spec"]["holderIdentity"], "replica-a");
  EXPECT_EQ(lease["spec"]["leaseDurationSeconds"], 2);
  EXPECT_EQ(lease["spec"]["leaseTransitions"], 0);
  const std::string first_renew = lease["spec"]["renewTime"];
  EXPECT_FALSE(lease["spec"].value("acquireTime", "").empty());
  // Renewals move renewTime and keep acquireTime.
  ASSERT_TRUE(testing::WaitUntil(
      [&] { return ReadLease(server)["spec"].value("renewTime", "") != first_renew; }));
  Json renewed = ReadLease(server);
  EXPECT_EQ(renewed["spec"]["acquireTime"], lease["spec"]["acquireTime"]);
  EXPECT_EQ(renewed["spec"]["holderIdentity"], "replica-a");
  // Every renewal was an update carrying the resourceVersion it read.
  bool update_seen = false;
  for (const auto& entry : server.Log()) {
    if (entry["method"] != "PUT") continue;
    update_seen = true;
    EXPECT_FALSE(entry["body"]["metadata"].value("resourceVersion", "").empty());
  }
  EXPECT_TRUE(update_seen);
}

TEST(KubernetesLeaderElection, OneLeaderAtATimeAndATakeoverAfterTheHolderStops) {
  FakeApiServer server;
  auto first = std::make_unique<LeaderElector>(Plain(server), Short("replica-a"), nullptr, nullptr);
  ASSERT_TRUE(testing::WaitUntil([&] { return first->IsLeader(); }));
  std::atomic<int> second_started{0};
  LeaderElector second(
      Plain(server), Short("replica-b"), [&] { ++second_started; }, nullptr);
  ASSERT_TRUE(testing::WaitUntil([&] { return second.ObservedHolder() == "replica-a"; }));
  // While the holder renews, the other never leads: sampled over several renewals.
  for (int i = 0; i < 10; ++i) {
    EXPECT_FALSE(second.IsLeader());
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_EQ(second_started.load(), 0);
  first.reset();  // stops renewing without releasing, like a replica killed
  ASSERT_TRUE(testing::WaitUntil([&] { return second.IsLeader(); }));
  EXPECT_EQ(second_started.load(), 1);
  Json lease = ReadLease(server);
  EXPECT_EQ(lease["spec"]["holderIdentity"], "replica-b");
  EXPECT_EQ(lease["spec"]["leaseTransitions"], 1);
}

TEST(KubernetesLeaderElection, AConflictOnRenewalEndsLeadership) {
  FakeApiServer server;
  std::atomic<int> stopped{0};
  LeaderElector elector(Plain(server), Short("replica-a"), nullptr, [&] { ++stopped; });
  ASSERT_TRUE(testing::WaitUntil([&] { return elector.IsLeader(); }));
  // Another writer got in between this replica's read and its update.
  server.Script({{{"method", "PUT"},
                  {"path", "/leases/tessera-control-plane$"},
                  {"status", 409},
                  {"reason", "Conflict"},
                  {"times", 1}}});
  ASSERT_TRUE(testing::WaitUntil([&] { return stopped.load() >= 1; }));
  // Nothing else holds the Lease, so it is this replica's again on a later attempt.
  ASSERT_TRUE(testing::WaitUntil([&] { return elector.IsLeader(); }));
}

TEST(KubernetesLeaderElection, AStaleUpdateOfTheLeaseIsRefused) {
  FakeApiServer server;
  Client client(Plain(server));
  Json lease = {{"apiVersion", "coordination.k8s.io/v1"},
                {"kind", "Lease"},
                {"metadata", {{"name", "tessera-control-plane"}}},
                {"spec", {{"holderIdentity", "x"}, {"leaseDurationSeconds", 2}}}};
  auto created = client.Create(Resource::Leases(), "tessera-system", lease);
  ASSERT_TRUE(created.ok());
  Json newer = *created;
  newer["spec"]["holderIdentity"] = "y";
  ASSERT_TRUE(
      client.Replace(Resource::Leases(), "tessera-system", "tessera-control-plane", newer).ok());
  Json stale = *created;  // the first resourceVersion
  stale["spec"]["holderIdentity"] = "z";
  auto refused =
      client.Replace(Resource::Leases(), "tessera-system", "tessera-control-plane", stale);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().category, ErrorCategory::kFailedPrecondition);
  Json patch = {{"metadata", {{"resourceVersion", (*created)["metadata"]["resourceVersion"]}}},
                {"spec", {{"holderIdentity", "z"}}}};
  auto patched = client.Patch(Resource::Leases(), "tessera-system", "tessera-control-plane", patch);
  ASSERT_FALSE(patched.ok());
  EXPECT_EQ(patched.error().category, ErrorCategory::kFailedPrecondition);
  EXPECT_EQ(ReadLease(server)["spec"]["holderIdentity"], "y");
}

}  // namespace
}  // namespace tessera::k8s

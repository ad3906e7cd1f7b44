// The control plane's DRA lease flow against the scripted API server, the test playing the
// scheduler by writing the claim's allocation through /status: submission → pinned claim → Pod
// referencing it → an allocation equal to the lease runs; a different one fails the container
// (its Pod is deleted, the reason recorded); the firmware-check Job runs on the allocated GPUs;
// the claim is deleted once the check has run.
#include <gtest/gtest.h>

#include "backends/kubernetes/claims.h"
#include "backends/kubernetes/controller.h"
#include "backends/kubernetes/objects.h"
#include "kubernetes/client.h"
#include "kubernetes/fake_apiserver.h"
#include "kubernetes/plain_config.h"

namespace tessera::k8s {
namespace {

using testing::FakeApiServer;

Client Plain(const FakeApiServer& server) {
  return Client(testing::PlainConfig(server));
}

struct DraLeaseFlow {
  DraLeaseFlow() : client(Plain(server)) {
    request.tenancy = "team-a";
    request.name = "train-1";
    request.image = "cuda";
    request.gpus = 2;
    request.node = "gpu-node-1";
    request.lease_name = "lease-train-1";
    request.resource_claim = "lease-train-1";
    lease = {"lease-train-1", "team-a", "gpu-node-1", {"0000:18:00.0", "0000:2a:00.0"},
             "tenant-team-a", "train-1"};
  }
  Json Lease() { return *client.Get(Resource::GpuLeases(), "", "lease-train-1"); }
  Result<Json> Claim() { return client.Get(ResourceClaims(), "tenant-team-a", "lease-train-1"); }
  Result<Json> Pod() { return client.Get(Resource::Pods(), "tenant-team-a", "train-1"); }
  // What the scheduler writes when it allocates the claim.
  void Allocate(const std::vector<std::string>& devices, const std::string& pool = "gpu-node-1") {
    Json results = Json::array();
    for (const auto& device : devices)
      results.push_back(
          {{"request", "gpus"}, {"driver", "gpu.tessera.dev"}, {"pool", pool}, {"device", device}});
    ASSERT_TRUE(client
                    .Patch(ResourceClaims(), "tenant-team-a", "lease-train-1",
                           {{"status", {{"allocation", {{"devices", {{"results", results}}}}}}}},
                           PatchType::kMerge, "status")
                    .ok());
  }
  std::vector<std::string> CheckedGpus() {
    auto job = client.Get(Resource::Jobs(), check.namespace_, FirmwareCheckJobName(lease.name));
    EXPECT_TRUE(job.ok());
    std::vector<std::string> gpus;
    if (!job) return gpus;
    auto command = (*job)["spec"]["template"]["spec"]["containers"][0]["command"];
    for (size_t i = 0; i + 1 < command.size(); ++i)
      if (command[i] == "--gpu") gpus.push_back(command[i + 1]);
    return gpus;
  }
  FakeApiServer server;
  Client client;
  PodRequest request;
  LeaseSpec lease;
  FirmwareCheckOptions check;
};

TEST(DraLeaseFlow, PinnedClaimAllocatedAsLeasedRunsThenIsCheckedAndDeleted) {
  DraLeaseFlow f;
  ASSERT_TRUE(StartPod(f.client, f.request, {}, f.lease).ok());
  // The claim pins exactly the leased GPUs; the Pod references it instead of a GPU limit.
  auto claim = f.Claim();
  ASSERT_TRUE(claim.ok());
  const Json& exactly = (*claim)["spec"]["devices"]["requests"][0]["exactly"];
  EXPECT_EQ(exactly["count"], 2);
  EXPECT_EQ(exactly["selectors"][0]["cel"]["expression"], PinnedSelector(f.lease.gpu_ids));
  EXPECT_FALSE(claim->contains("status"));  // created unallocated
  auto pod = f.Pod();
  ASSERT_TRUE(pod.ok());
  EXPECT_EQ((*pod)["spec"]["resourceClaims"][0]["resourceClaimName"], "lease-train-1");
  EXPECT_FALSE((*pod)["spec"]["containers"][0]["resources"].contains("limits"));
  // The lease records the claim's name and UID; the node's lease file pins the GPUs to it.
  EXPECT_EQ(f.Lease()["status"]["claim"]["name"], "lease-train-1");
  EXPECT_EQ(f.Lease()["status"]["claim"]["uid"], (*claim)["metadata"]["uid"]);
  EXPECT_EQ(f.Lease()["status"]["state"], "active");

  // Not allocated yet, then allocated exactly as leased: the Pod runs on.
  EXPECT_EQ(*ReconcileLease(f.client, f.Lease(), f.check), "active");
  f.Allocate({"gpu-0000-2a-00-0", "gpu-0000-18-00-0"});
  EXPECT_EQ(*ReconcileLease(f.client, f.Lease(), f.check), "active");
  EXPECT_TRUE(f.Pod().ok());

  ASSERT_TRUE(f.client
                  .Patch(Resource::Pods(), "tenant-team-a", "train-1",
                         {{"status", {{"phase", "Succeeded"}}}}, PatchType::kMerge, "status")
                  .ok());
  EXPECT_EQ(*ReconcileLease(f.client, f.Lease(), f.check), "checking");
  EXPECT_EQ(f.CheckedGpus(), (std::vector<std::string>{"0000:18:00.0", "0000:2a:00.0"}));
  EXPECT_TRUE(f.Claim().ok());  // kept until the check has run
  ASSERT_TRUE(f.client
                  .Patch(Resource::Jobs(), f.check.namespace_, FirmwareCheckJobName(f.lease.name),
                         {{"status", {{"succeeded", 1}}}}, PatchType::kMerge, "status")
                  .ok());
  EXPECT_EQ(*ReconcileLease(f.client, f.Lease(), f.check), "free");
  ASSERT_FALSE(f.Claim().ok());
  EXPECT_EQ(f.Claim().error().category, ErrorCategory::kNotFound);
}

TEST(DraLeaseFlow, AllocationOtherThanTheLeaseFailsTheContainerAndTheCheckFollowsIt) {
  DraLeaseFlow f;
  ASSERT_TRUE(StartPod(f.client, f.request, {}, f.lease).ok());
  // The scheduler gave GPU 3a instead of 2a.
  f.Allocate({"gpu-0000-18-00-0", "gpu-0000-3a-00-0"});
  EXPECT_EQ(*ReconcileLease(f.client, f.Lease(), f.check), "active");
  ASSERT_FALSE(f.Pod().ok());  // the container failed: its Pod is gone
  std::string reason = f.Lease()["status"]["reason"];
  EXPECT_NE(reason.find("gpu-0000-3a-00-0"), std::string::npos) << reason;
  EXPECT_NE(reason.find("the lease pins"), std::string::npos) << reason;
  // The next step checks exactly what the Pod could have touched: the allocated GPUs.
  EXPECT_EQ(*ReconcileLease(f.client, f.Lease(), f.check), "checking");
  EXPECT_EQ(f.CheckedGpus(), (std::vector<std::string>{"0000:18:00.0", "0000:3a:00.0"}));
  EXPECT_NE(f.Lease()["status"]["reason"].get<std::string>().find("the lease pins"),
            std::string::npos);
  ASSERT_TRUE(f.client
                  .Patch(Resource::Jobs(), f.check.namespace_, FirmwareCheckJobName(f.lease.name),
                         {{"status", {{"failed", 1}}}}, PatchType::kMerge, "status")
                  .ok());
  EXPECT_EQ(*ReconcileLease(f.client, f.Lease(), f.check), "quarantined");
  EXPECT_FALSE(f.Claim().ok());
}

TEST(DraLeaseFlow, AnotherPoolOrAnUnreadableAllocationFailsTheContainerToo) {
  DraLeaseFlow f;
  ASSERT_TRUE(StartPod(f.client, f.request, {}, f.lease).ok());
  f.Allocate({"gpu-0000-18-00-0", "gpu-0000-2a-00-0"}, "gpu-node-2");
  EXPECT_EQ(*ReconcileLease(f.client, f.Lease(), f.check), "active");
  EXPECT_FALSE(f.Pod().ok());
  EXPECT_NE(f.Lease()["status"]["reason"].get<std::string>().find("gpu-node-2"), std::string::npos);

  DraLeaseFlow g;
  ASSERT_TRUE(StartPod(g.client, g.request, {}, g.lease).ok());
  ASSERT_TRUE(g.client
                  .Patch(ResourceClaims(), "tenant-team-a", "lease-train-1",
                         {{"status", {{"allocation", {{"devices", {{"results", "everything"}}}}}}}},
                         PatchType::kMerge, "status")
                  .ok());
  EXPECT_EQ(*ReconcileLease(g.client, g.Lease(), g.check), "active");
  EXPECT_FALSE(g.Pod().ok());
  EXPECT_NE(g.Lease()["status"]["reason"].get<std::string>().find("results"), std::string::npos);
}

}  // namespace
}  // namespace tessera::k8s

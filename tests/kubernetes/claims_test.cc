// The control plane's DRA claims: the GPU API a cluster gets, the claim pinning a lease's GPUs,
// and the allocation read back and compared with the lease.
#include "backends/kubernetes/claims.h"

#include <gtest/gtest.h>

#include "backends/kubernetes/objects.h"
#include "nodeagent/lease_file.h"

namespace tessera::k8s {
namespace {

PinnedClaim TwoGpus() {
  PinnedClaim claim;
  claim.name = "lease-train-1";
  claim.namespace_ = "tenant-team-a";
  claim.node = "gpu-node-1";
  claim.pci_addresses = {"0000:18:00.0", "0000:2a:00.0"};
  claim.lease_name = "lease-train-1";
  return claim;
}

Json Allocated(const std::vector<std::pair<std::string, std::string>>& pool_devices,
               const std::string& driver = kDraDriver) {
  Json results = Json::array();
  for (const auto& [pool, device] : pool_devices)
    results.push_back(
        {{"request", "gpus"}, {"driver", driver}, {"pool", pool}, {"device", device}});
  return {{"metadata", {{"uid", "c0ffee00-0000-4000-8000-000000000001"}}},
          {"status", {{"allocation", {{"devices", {{"results", results}}}}}}}};
}

TEST(GpuApi, DraWhenDiscoveryListsResourceV1) {
  Json groups = {
      {"kind", "APIGroupList"},
      {"groups",
       Json::array({{{"name", "apps"}, {"versions", {{{"version", "v1"}}}}},
                    {{"name", "resource.k8s.io"}, {"versions", {{{"version", "v1beta2"}}}}}})}};
  EXPECT_EQ(DefaultGpuApi(groups), GpuApi::kDevicePlugin);  // beta only: not GA DRA
  groups["groups"][1]["versions"].push_back({{"version", "v1"}});
  EXPECT_EQ(DefaultGpuApi(groups), GpuApi::kDra);
  EXPECT_EQ(DefaultGpuApi(Json("garbage")), GpuApi::kDevicePlugin);
  EXPECT_EQ(*ParseGpuApi("device-plugin"), GpuApi::kDevicePlugin);
  EXPECT_STREQ(GpuApiName(*ParseGpuApi("dra")), "dra");
  EXPECT_FALSE(ParseGpuApi("both").ok());
}

TEST(PinnedClaim, OneExactCountRequestWhoseSelectorAdmitsOnlyTheLeasedGpus) {
  Json claim = BuildPinnedClaim(TwoGpus());
  EXPECT_EQ(claim["apiVersion"], "resource.k8s.io/v1");
  EXPECT_EQ(claim["metadata"]["namespace"], "tenant-team-a");
  EXPECT_EQ(claim["metadata"]["labels"]["tessera.dev/lease"], "lease-train-1");
  ASSERT_EQ(claim["spec"]["devices"]["requests"].size(), 1u);
  const Json& exactly = claim["spec"]["devices"]["requests"][0]["exactly"];
  EXPECT_EQ(claim["spec"]["devices"]["requests"][0]["name"], "gpus");
  EXPECT_EQ(exactly["deviceClassName"], "gpu.tessera.dev");
  EXPECT_EQ(exactly["allocationMode"], "ExactCount");
  EXPECT_EQ(exactly["count"], 2);
  EXPECT_EQ(exactly["selectors"][0]["cel"]["expression"],
            "device.driver == \"gpu.tessera.dev\" && "
            "device.attributes[\"resource.kubernetes.io\"].pciBusID in "
            "[\"0000:18:00.0\", \"0000:2a:00.0\"]");
  PinnedClaim kata = TwoGpus();
  kata.vfio = true;
  EXPECT_EQ(BuildPinnedClaim(kata)["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"],
            "vfio.gpu.tessera.dev");
}

TEST(DraDeviceName, RoundTripsAndRefusesOtherShapes) {
  EXPECT_EQ(DraDeviceName("0000:18:00.0"), "gpu-0000-18-00-0");
  EXPECT_EQ(PciAddressOfDraDevice("gpu-0000-18-00-0"), "0000:18:00.0");
  for (const char* bad : {"gpu-0000-18-00", "gpu-0000-18-00-0x", "cpu-0000-18-00-0",
                          "gpu-0000:18:00.0", "gpu-00g0-18-00-0"})
    EXPECT_EQ(PciAddressOfDraDevice(bad), "") << bad;
}

TEST(ClaimAllocation, EqualToTheLeaseIsNoMismatchAndAnyDifferenceIsNamed) {
  PinnedClaim pinned = TwoGpus();
  auto same = ClaimAllocationOf(
      Allocated({{"gpu-node-1", "gpu-0000-2a-00-0"}, {"gpu-node-1", "gpu-0000-18-00-0"}}));
  ASSERT_TRUE(same.ok()) << same.error().message;
  EXPECT_TRUE(same->allocated);
  EXPECT_EQ(AllocationMismatch(pinned, *same), "");
  EXPECT_EQ(AllocatedPciAddresses(*same),
            (std::vector<std::string>{"0000:18:00.0", "0000:2a:00.0"}));

  auto other_gpu = ClaimAllocationOf(
      Allocated({{"gpu-node-1", "gpu-0000-18-00-0"}, {"gpu-node-1", "gpu-0000-3a-00-0"}}));
  std::string why = AllocationMismatch(pinned, *other_gpu);
  EXPECT_NE(why.find("gpu-0000-3a-00-0"), std::string::npos) << why;
  auto other_pool = ClaimAllocationOf(
      Allocated({{"gpu-node-2", "gpu-0000-18-00-0"}, {"gpu-node-2", "gpu-0000-2a-00-0"}}));
  EXPECT_NE(AllocationMismatch(pinned, *other_pool), "");
  auto other_driver = ClaimAllocationOf(Allocated(
      {{"gpu-node-1", "gpu-0000-18-00-0"}, {"gpu-node-1", "gpu-0000-2a-00-0"}}, "gpu.nvidia.com"));
  EXPECT_NE(AllocationMismatch(pinned, *other_driver), "");
  EXPECT_TRUE(AllocatedPciAddresses(*other_driver).empty());
  auto fewer = ClaimAllocationOf(Allocated({{"gpu-node-1", "gpu-0000-18-00-0"}}));
  EXPECT_NE(AllocationMismatch(pinned, *fewer), "");

  Json pending = {{"metadata", {{"uid", "u"}}}, {"status", Json::object()}};
  auto unallocated = ClaimAllocationOf(pending);
  ASSERT_TRUE(unallocated.ok());
  EXPECT_FALSE(unallocated->allocated);
  EXPECT_NE(AllocationMismatch(pinned, *unallocated).find("not allocated"), std::string::npos);
}

TEST(ClaimAllocation, HostileStatusIsRefusedNamingTheField) {
  Json many = Allocated({});
  for (int i = 0; i < 40; ++i)
    many["status"]["allocation"]["devices"]["results"].push_back(
        {{"request", "gpus"}, {"driver", "d"}, {"pool", "p"}, {"device", "x"}});
  EXPECT_FALSE(ClaimAllocationOf(many).ok());
  Json long_field = Allocated({{"gpu-node-1", std::string(5000, 'a')}});
  auto refused = ClaimAllocationOf(long_field);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("results[0].device"), std::string::npos);
  EXPECT_LT(refused.error().message.size(), 200u);
  Json no_uid = Allocated({});
  no_uid["metadata"].erase("uid");
  EXPECT_FALSE(ClaimAllocationOf(no_uid).ok());
  Json wrong_type = Allocated({});
  wrong_type["status"]["allocation"]["devices"]["results"] = "all of them";
  EXPECT_FALSE(ClaimAllocationOf(wrong_type).ok());
}

TEST(PinnedClaim, PodReferencesTheClaimInsteadOfAGpuLimitAndKeepsItsNode) {
  PodRequest request{"team-a", "train-1", "cuda"};
  request.gpus = 2;
  request.node = "gpu-node-1";
  request.resource_claim = "lease-train-1";
  auto pod = BuildPod(request, {});
  ASSERT_TRUE(pod.ok());
  const Json& spec = (*pod)["spec"];
  ASSERT_EQ(spec["resourceClaims"].size(), 1u);
  EXPECT_EQ(spec["resourceClaims"][0]["resourceClaimName"], "lease-train-1");
  const Json& resources = spec["containers"][0]["resources"];
  EXPECT_EQ(resources["claims"][0]["name"], spec["resourceClaims"][0]["name"]);
  EXPECT_FALSE(resources.contains("limits"));
  EXPECT_EQ(spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                ["nodeSelectorTerms"][0]["matchFields"][0]["values"][0],
            "gpu-node-1");
  // Without a claim: the device plugin's limit, as before.
  request.resource_claim.clear();
  EXPECT_EQ(
      (*BuildPod(request, {}))["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"],
      "2");
}

TEST(PinnedClaim, LeaseFilePinsTheLeasedGpusToTheClaimUid) {
  LeaseSpec spec{"lease-train-1",  "team-a",        "gpu-node-1",
                 {"0000:18:00.0"}, "tenant-team-a", "train-1"};
  Json lease = BuildGpuLease(spec);
  lease["status"] = {{"state", "active"},
                     {"claim", {{"name", "lease-train-1"}, {"uid", "c0ffee00-1"}}}};
  Json file = Json::parse(LeaseFileFor({{"items", Json::array({lease})}}, "gpu-node-1"));
  EXPECT_EQ(file["gpus"]["0000:18:00.0"]["claim"], "c0ffee00-1");
  lease["status"].erase("claim");
  file = Json::parse(LeaseFileFor({{"items", Json::array({lease})}}, "gpu-node-1"));
  EXPECT_FALSE(file["gpus"]["0000:18:00.0"].contains("claim"));
}

}  // namespace
}  // namespace tessera::k8s

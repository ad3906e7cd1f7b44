// Tenancy controller and GPU lease flow against the scripted API server: objects created,
// idempotent second pass, drift repaired, NFS PV/PVCs in pv mode, and the lease state machine
// (reserved → active → checking + Job → free | quarantined).
#include "backends/kubernetes/controller.h"

#include <gtest/gtest.h>

#include "backends/kubernetes/objects.h"
#include "kubernetes/client.h"
#include "kubernetes/fake_apiserver.h"
#include "kubernetes/plain_config.h"
#include "nodeagent/lease_file.h"

namespace tessera::k8s {
namespace {

using testing::FakeApiServer;

ClientConfig Plain(const FakeApiServer& server) {
  return testing::PlainConfig(server);
}

const std::vector<NfsEntitlement> kNfs = {{"datasets", "10.0.0.5", "/exports/datasets", true}};

Json CreateTenancy(Client& client, const std::string& name) {
  auto created = client.Create(Resource::Tenancies(), "", BuildTenancy(name, kNfs));
  EXPECT_TRUE(created.ok()) << created.error().message;
  return *created;
}

int Writes(const Json& log) {
  int n = 0;
  for (const auto& e : log)
    n += e["method"] != "GET";
  return n;
}

TEST(TenancyController, CreatesNamespaceAndPoliciesThenMarksReady) {
  FakeApiServer server;
  Client client(Plain(server));
  Json tenancy = CreateTenancy(client, "team-a");
  ASSERT_TRUE(ReconcileTenancy(client, tenancy, {}).ok());
  EXPECT_TRUE(client.Get(Resource::Namespaces(), "", "tenant-team-a").ok());
  auto cnp = client.Get(Resource::CiliumNetworkPolicies(), "tenant-team-a", "tenant-isolation");
  ASSERT_TRUE(cnp.ok());
  EXPECT_EQ((*cnp)["spec"]["egress"][2]["toCIDR"][0], "10.0.0.5/32");
  EXPECT_TRUE(client.Get(Resource::NetworkPolicies(), "tenant-team-a", "tenant-isolation").ok());
  auto live = client.Get(Resource::Tenancies(), "", "team-a");
  EXPECT_EQ((*live)["status"]["phase"], "Ready");
  EXPECT_EQ((*live)["status"]["namespace"], "tenant-team-a");

  // Second pass over the live object: reads only.
  server.ClearLog();
  ASSERT_TRUE(ReconcileTenancy(client, *live, {}).ok());
  EXPECT_EQ(Writes(server.Log()), 0) << server.Log().dump();
}

TEST(TenancyController, RepairsDriftAndRecreatesDeletedObjects) {
  FakeApiServer server;
  Client client(Plain(server));
  Json tenancy = CreateTenancy(client, "team-a");
  ASSERT_TRUE(ReconcileTenancy(client, tenancy, {}).ok());
  // Someone opens the policy to all ingress and deletes the Cilium policy.
  auto np = client.Get(Resource::NetworkPolicies(), "tenant-team-a", "tenant-isolation");
  Json open = *np;
  open["spec"]["ingress"] = Json::array({Json::object()});
  ASSERT_TRUE(
      client.Replace(Resource::NetworkPolicies(), "tenant-team-a", "tenant-isolation", open).ok());
  ASSERT_TRUE(
      client.Delete(Resource::CiliumNetworkPolicies(), "tenant-team-a", "tenant-isolation").ok());
  auto live = client.Get(Resource::Tenancies(), "", "team-a");
  ASSERT_TRUE(ReconcileTenancy(client, *live, {}).ok());
  auto repaired = client.Get(Resource::NetworkPolicies(), "tenant-team-a", "tenant-isolation");
  EXPECT_EQ((*repaired)["spec"]["ingress"], BuildNetworkPolicy("team-a", kNfs)["spec"]["ingress"]);
  EXPECT_TRUE(
      client.Get(Resource::CiliumNetworkPolicies(), "tenant-team-a", "tenant-isolation").ok());
}

TEST(TenancyController, PvModeCreatesAVolumePairPerEntitlementAndCiliumCanBeOff) {
  FakeApiServer server;
  Client client(Plain(server));
  Json tenancy = CreateTenancy(client, "team-a");
  TenancyControllerOptions options;
  options.cilium = false;
  options.nfs_mode = NfsMode::kPersistentVolume;
  ASSERT_TRUE(ReconcileTenancy(client, tenancy, options).ok());
  auto pv = client.Get(Resource::PersistentVolumes(), "", "tessera-team-a-datasets");
  ASSERT_TRUE(pv.ok());
  EXPECT_EQ((*pv)["spec"]["nfs"]["server"], "10.0.0.5");
  EXPECT_TRUE(client.Get(Resource::PersistentVolumeClaims(), "tenant-team-a", "datasets").ok());
  EXPECT_EQ(client.Get(Resource::CiliumNetworkPolicies(), "tenant-team-a", "tenant-isolation")
                .error()
                .category,
            ErrorCategory::kNotFound);
}

TEST(TenancyController, BadNameLeavesTheTenancyPendingWithTheReason) {
  FakeApiServer server;
  Client client(Plain(server));
  Json bad = BuildTenancy("x", {});
  bad["spec"]["name"] = "Not_A_Label";
  ASSERT_TRUE(client.Create(Resource::Tenancies(), "", bad).ok());
  EXPECT_FALSE(ReconcileTenancy(client, bad, {}).ok());
  auto live = client.Get(Resource::Tenancies(), "", "x");
  EXPECT_EQ((*live)["status"]["phase"], "Pending");
  EXPECT_NE((*live)["status"]["message"].get<std::string>().find("Not_A_Label"), std::string::npos);
}

struct LeaseFlow {
  LeaseFlow() : client(Plain(server)) {
    request.tenancy = "team-a";
    request.name = "train-1";
    request.image = "cuda";
    request.gpus = 2;
    request.node = "gpu-node-1";
    request.lease_name = "lease-train-1";
    lease = {"lease-train-1", "team-a", "gpu-node-1", {"0000:18:00.0", "0000:2a:00.0"},
             "tenant-team-a", "train-1"};
  }
  Json Lease() { return *client.Get(Resource::GpuLeases(), "", "lease-train-1"); }
  std::string State() { return Lease()["status"].value("state", ""); }
  FakeApiServer server;
  Client client;
  PodRequest request;
  LeaseSpec lease;
  FirmwareCheckOptions check;
};

TEST(LeaseFlow, FinishedPodIsCheckedThenFreed) {
  LeaseFlow f;
  auto pod = StartPod(f.client, f.request, {}, f.lease);
  ASSERT_TRUE(pod.ok()) << pod.error().message;
  // The lease was created before the pod.
  Json log = f.server.Log();
  size_t lease_at = 0, pod_at = 0;
  for (size_t i = 0; i < log.size(); ++i) {
    if (log[i]["method"] == "POST" && log[i]["path"] == "/apis/tessera.dev/v1alpha1/gpuleases")
      lease_at = i + 1;
    if (log[i]["method"] == "POST" && log[i]["path"] == "/api/v1/namespaces/tenant-team-a/pods")
      pod_at = i + 1;
  }
  ASSERT_GT(lease_at, 0u);
  EXPECT_LT(lease_at, pod_at);
  EXPECT_EQ(f.State(), "active");
  EXPECT_EQ(*ReconcileLease(f.client, f.Lease(), f.check), "active");  // still running

  ASSERT_TRUE(f.client
                  .Patch(Resource::Pods(), "tenant-team-a", "train-1",
                         {{"status", {{"phase", "Succeeded"}}}}, PatchType::kMerge, "status")
                  .ok());
  EXPECT_EQ(*ReconcileLease(f.client, f.Lease(), f.check), "checking");
  EXPECT_EQ(f.State(), "checking");
  const std::string job = FirmwareCheckJobName("lease-train-1");
  auto created = f.client.Get(Resource::Jobs(), "tessera-system", job);
  ASSERT_TRUE(created.ok());
  EXPECT_EQ((*created)["spec"]["template"]["spec"]["nodeName"], "gpu-node-1");
  EXPECT_EQ(*ReconcileLease(f.client, f.Lease(), f.check), "checking");  // job still running

  ASSERT_TRUE(f.client
                  .Patch(Resource::Jobs(), "tessera-system", job, {{"status", {{"succeeded", 1}}}},
                         PatchType::kMerge, "status")
                  .ok());
  EXPECT_EQ(*ReconcileLease(f.client, f.Lease(), f.check), "free");
  EXPECT_EQ(f.Lease()["status"]["reason"], "firmware check passed");
  EXPECT_EQ(f.client.Get(Resource::Jobs(), "tessera-system", job).error().category,
            ErrorCategory::kNotFound);
}

TEST(LeaseFlow, FailedCheckQuarantinesAndADeletedPodCountsAsFinished) {
  LeaseFlow f;
  ASSERT_TRUE(StartPod(f.client, f.request, {}, f.lease).ok());
  ASSERT_TRUE(f.client.Delete(Resource::Pods(), "tenant-team-a", "train-1").ok());
  EXPECT_EQ(*ReconcileLease(f.client, f.Lease(), f.check), "checking");
  const std::string job = FirmwareCheckJobName("lease-train-1");
  ASSERT_TRUE(f.client
                  .Patch(Resource::Jobs(), "tessera-system", job, {{"status", {{"failed", 1}}}},
                         PatchType::kMerge, "status")
                  .ok());
  EXPECT_EQ(*ReconcileLease(f.client, f.Lease(), f.check), "quarantined");
  // The node agent's lease file marks those GPUs quarantined.
  auto list = f.client.List(Resource::GpuLeases(), "");
  Json file = Json::parse(LeaseFileFor(*list, "gpu-node-1"));
  EXPECT_EQ(file["gpus"]["0000:2a:00.0"]["state"], "quarantined");
}

TEST(LeaseFlow, RefusedVolumeCreatesNothing) {
  LeaseFlow f;
  f.request.volumes = {{"not-mine", "/x", false}};
  auto pod = StartPod(f.client, f.request, kNfs, f.lease);
  ASSERT_FALSE(pod.ok());
  EXPECT_EQ(pod.error().category, ErrorCategory::kPermissionDenied);
  EXPECT_EQ(Writes(f.server.Log()), 0);
}

}  // namespace
}  // namespace tessera::k8s

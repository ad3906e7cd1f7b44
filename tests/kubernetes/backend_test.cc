// The Kubernetes ContainerBackend against the scripted API server: a start makes a lease then a
// Pod in the tenant namespace; the Pod's end reaches the exit callback with its exit code; the
// lease then goes checking (firmware-check Job) and free.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>

#include "backends/kubernetes/kubernetes_backend.h"
#include "kubernetes/fake_apiserver.h"

namespace tessera::backends {
namespace {

using k8s::Json;
using k8s::Resource;
using testing::FakeApiServer;

struct Fixture {
  Fixture() : admin(Config()) {
    KubernetesBackendOptions options;
    options.client = Config();
    options.instance = "test";
    options.node = "gpu-node-1";
    options.poll_interval = std::chrono::milliseconds(100);
    backend = CreateKubernetesBackend(options);
  }
  k8s::ClientConfig Config() {
    k8s::ClientConfig config;
    config.server = server.url();
    return config;
  }
  bool WaitExit(int* code) {
    std::unique_lock<std::mutex> lock(mu);
    bool ok = cv.wait_for(lock, std::chrono::seconds(10), [&] { return exited; });
    if (ok && info.exit_code) *code = *info.exit_code;
    return ok;
  }
  std::string LeaseState() {
    auto lease = admin.Get(Resource::GpuLeases(), "", "lease-tessera-c1");
    return lease ? (*lease)["status"].value("state", "") : "missing";
  }
  FakeApiServer server;
  k8s::Client admin;
  std::unique_ptr<ContainerBackend> backend;
  std::mutex mu;
  std::condition_variable cv;
  bool exited = false;
  ExitInfo info;
};

TEST(KubernetesBackend, RunsAPodAndReportsItsExitThenChecksTheLease) {
  Fixture f;
  StartRequest request;
  request.id = "C1";
  request.tenancy = "team-a";
  request.image = "cuda";
  request.command = {"nvidia-smi"};
  request.isolation = fleet::Isolation::kGvisor;
  request.gpu_pci_addresses = {"0000:18:00.0"};
  ASSERT_TRUE(f.backend
                  ->Start(request,
                          [&](const std::string&, const ExitInfo& info) {
                            std::lock_guard<std::mutex> lock(f.mu);
                            f.exited = true;
                            f.info = info;
                            f.cv.notify_all();
                          })
                  .ok());
  auto pod = f.admin.Get(Resource::Pods(), "tenant-team-a", "tessera-c1");
  ASSERT_TRUE(pod.ok());
  EXPECT_EQ((*pod)["spec"]["runtimeClassName"], "gvisor");
  EXPECT_EQ((*pod)["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"], "1");
  EXPECT_TRUE(f.admin.Get(Resource::NetworkPolicies(), "tenant-team-a", "tenant-isolation").ok());
  EXPECT_EQ(f.LeaseState(), "active");
  auto listed = f.backend->List();
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].id, "C1");
  EXPECT_EQ(*f.backend->Logs("C1"), "logs of tessera-c1\n");

  Json finished = {
      {"status",
       {{"phase", "Failed"},
        {"containerStatuses",
         Json::array({{{"name", "main"}, {"state", {{"terminated", {{"exitCode", 3}}}}}}})}}}};
  ASSERT_TRUE(f.admin
                  .Patch(Resource::Pods(), "tenant-team-a", "tessera-c1", finished,
                         k8s::PatchType::kMerge, "status")
                  .ok());
  int code = -1;
  ASSERT_TRUE(f.WaitExit(&code));
  EXPECT_EQ(code, 3);
  EXPECT_EQ(f.backend->Inspect("C1")->state, BackendState::kExited);
  // The poller moves the lease to checking and starts the firmware check.
  for (int i = 0; i < 50 && f.LeaseState() != "checking"; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(f.LeaseState(), "checking");
  ASSERT_TRUE(f.admin
                  .Patch(Resource::Jobs(), "tessera-system",
                         k8s::FirmwareCheckJobName("lease-tessera-c1"),
                         {{"status", {{"succeeded", 1}}}}, k8s::PatchType::kMerge, "status")
                  .ok());
  for (int i = 0; i < 50 && f.LeaseState() != "free"; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(f.LeaseState(), "free");

  ASSERT_TRUE(f.backend->Remove("C1").ok());
  EXPECT_EQ(f.backend->Inspect("C1").error().category, ErrorCategory::kNotFound);
}

TEST(KubernetesBackend, EntitledNfsVolumesBecomePodVolumesAndNfsEgressExceptions) {
  Fixture f;
  StartRequest request;
  request.id = "C2";
  request.tenancy = "team-a";
  request.image = "busybox";
  tenancy::ResolvedVolume data;
  data.source = {"datasets", "10.0.0.5", "/exports/datasets", 0, true};
  data.mount_path = "/data";
  data.read_only = true;
  request.volumes = {data};
  // The tenancy is entitled to two exports; the policy allows both servers even though this
  // submission mounts one, so starting it never narrows another Pod's egress.
  tenancy::StorageEntitlements storage;
  storage.nfs = {data.source, {"scratch", "10.0.0.6", "/exports/scratch", 0, false}};
  ASSERT_TRUE(f.backend->PrepareTenancy("team-a", storage).ok());
  ASSERT_TRUE(f.backend->Start(request, [](const std::string&, const ExitInfo&) {}).ok());
  auto pod = f.admin.Get(Resource::Pods(), "tenant-team-a", "tessera-c2");
  ASSERT_TRUE(pod.ok());
  const Json& volume = (*pod)["spec"]["volumes"][0];
  EXPECT_EQ(volume["name"], "datasets");
  EXPECT_EQ(volume["nfs"]["server"], "10.0.0.5");
  EXPECT_EQ(volume["nfs"]["path"], "/exports/datasets");
  EXPECT_EQ(volume["nfs"]["readOnly"], true);
  const Json& mount = (*pod)["spec"]["containers"][0]["volumeMounts"][0];
  EXPECT_EQ(mount["mountPath"], "/data");
  EXPECT_EQ(mount["readOnly"], true);
  auto policy = f.admin.Get(Resource::NetworkPolicies(), "tenant-team-a", "tenant-isolation");
  ASSERT_TRUE(policy.ok());
  EXPECT_NE(policy->dump().find("10.0.0.5/32"), std::string::npos) << policy->dump();
  EXPECT_NE(policy->dump().find("10.0.0.6/32"), std::string::npos) << policy->dump();
}

TEST(KubernetesBackend, IsolationNeedsItsRuntimeClass) {
  Fixture f;
  EXPECT_TRUE(f.backend->CheckIsolation(fleet::Isolation::kRunc).ok());
  auto missing = f.backend->CheckIsolation(fleet::Isolation::kKata);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().category, ErrorCategory::kFailedPrecondition);
  EXPECT_NE(missing.error().message.find("kata-qemu-nvidia-gpu"), std::string::npos);
  ASSERT_TRUE(f.admin
                  .Create(Resource::RuntimeClasses(), "",
                          {{"apiVersion", "node.k8s.io/v1"},
                           {"kind", "RuntimeClass"},
                           {"metadata", {{"name", "kata-qemu-nvidia-gpu"}}},
                           {"handler", "kata-qemu-nvidia-gpu"}})
                  .ok());
  EXPECT_TRUE(f.backend->CheckIsolation(fleet::Isolation::kKata).ok());
}

TEST(KubernetesBackend, StopDeletesThePodAndItsVanishingIsAnExit) {
  Fixture f;
  StartRequest request;
  request.id = "C2";
  request.tenancy = "team-b";
  request.image = "busybox";
  ASSERT_TRUE(f.backend
                  ->Start(request,
                          [&](const std::string&, const ExitInfo& info) {
                            std::lock_guard<std::mutex> lock(f.mu);
                            f.exited = true;
                            f.info = info;
                            f.cv.notify_all();
                          })
                  .ok());
  ASSERT_TRUE(f.backend->Stop("C2", std::chrono::seconds(5)).ok());
  Json deleted;
  for (const auto& entry : f.server.Log()) {
    if (entry["method"] == "DELETE") deleted = entry;
  }
  EXPECT_EQ(deleted["path"], "/api/v1/namespaces/tenant-team-b/pods/tessera-c2");
  EXPECT_EQ(deleted["body"]["gracePeriodSeconds"], 5);
  int code = -1;
  ASSERT_TRUE(f.WaitExit(&code));
  EXPECT_TRUE(f.info.failed);
  EXPECT_NE(f.info.reason.find("vanished"), std::string::npos);
}

}  // namespace
}  // namespace tessera::backends

namespace tessera::backends {
namespace {

TEST(KubernetesBackend, RunsTheTenancyControllerAndRepairsDriftOnResync) {
  FakeApiServer server;
  k8s::ClientConfig config;
  config.server = server.url();
  k8s::Client admin(config);
  KubernetesBackendOptions options;
  options.client = config;
  options.tenancy_resync = std::chrono::milliseconds(500);
  auto backend = CreateKubernetesBackend(options);
  ASSERT_TRUE(admin
                  .Create(Resource::Tenancies(), "",
                          k8s::BuildTenancy("team-c", {{"data", "10.0.0.9", "/data", false}}))
                  .ok());
  auto phase = [&] {
    auto t = admin.Get(Resource::Tenancies(), "", "team-c");
    return t ? (*t).value("status", Json::object()).value("phase", "") : "";
  };
  for (int i = 0; i < 100 && phase() != "Ready"; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(phase(), "Ready");
  EXPECT_TRUE(admin.Get(Resource::Namespaces(), "", "tenant-team-c").ok());
  // Deleted behind the controller's back: the next resync recreates it.
  ASSERT_TRUE(admin.Delete(Resource::NetworkPolicies(), "tenant-team-c", "tenant-isolation").ok());
  bool back = false;
  for (int i = 0; i < 60 && !back; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    back = admin.Get(Resource::NetworkPolicies(), "tenant-team-c", "tenant-isolation").ok();
  }
  EXPECT_TRUE(back);
}

}  // namespace
}  // namespace tessera::backends

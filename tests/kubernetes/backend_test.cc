// The Kubernetes ContainerBackend against the scripted API server: a start makes a lease then a
// Pod in the tenant namespace; the Pod's end reaches the exit callback with its exit code through
// the Pod watch (no Pod is polled, and a 410 Gone relists); the lease then goes checking
// (firmware-check Job) and free.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>

#include "backends/kubernetes/kubernetes_backend.h"
#include "backends/kubernetes/objects.h"
#include "kubernetes/fake_apiserver.h"
#include "kubernetes/plain_config.h"
#include "support/wait.h"

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
    options.lease_interval = std::chrono::milliseconds(100);
    backend = CreateKubernetesBackend(options);
  }
  ExitCallback OnExit() {
    return [this](const std::string&, const ExitInfo& exit) {
      std::lock_guard<std::mutex> lock(mu);
      exited = true;
      info = exit;
      cv.notify_all();
    };
  }
  void FinishPod(const std::string& ns, const std::string& pod, const std::string& phase,
                 int code) {
    Json finished = {
        {"status",
         {{"phase", phase},
          {"containerStatuses",
           Json::array({{{"name", "main"}, {"state", {{"terminated", {{"exitCode", code}}}}}}})}}}};
    ASSERT_TRUE(
        admin.Patch(Resource::Pods(), ns, pod, finished, k8s::PatchType::kMerge, "status").ok());
  }
  // GETs of one Pod (not lists or watches) in the request log.
  int PodGets(const std::string& ns, const std::string& pod) {
    int gets = 0;
    for (const auto& entry : server.Log())
      if (entry["method"] == "GET" && entry["path"] == "/api/v1/namespaces/" + ns + "/pods/" + pod)
        ++gets;
    return gets;
  }
  k8s::ClientConfig Config() { return testing::PlainConfig(server); }
  bool WaitExit(int* code) {
    std::unique_lock<std::mutex> lock(mu);
    bool ok = cv.wait_for(lock, testing::kEventTimeout, [&] { return exited; });
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

// Whether the backend's Pod watch (one request for every namespace, selected by this
// instance's label) has reached the server.
bool PodWatchStarted(FakeApiServer& server) {
  for (const auto& entry : server.Log()) {
    std::string query = entry["query"];
    if (entry["path"] == "/api/v1/pods" && query.find("watch=1") != std::string::npos &&
        query.find("labelSelector=tessera.dev%2Finstance%3Dtest") != std::string::npos)
      return true;
  }
  return false;
}

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

  // The kubelet's record of the container's run: billing follows its finishedAt.
  Json finished = {{"status",
                    {{"phase", "Failed"},
                     {"containerStatuses",
                      Json::array({{{"name", "main"},
                                    {"state",
                                     {{"terminated",
                                       {{"exitCode", 3},
                                        {"startedAt", "2025-11-23T12:00:00Z"},
                                        {"finishedAt", "2025-11-23T12:00:07.250Z"}}}}}}})}}}};
  ASSERT_TRUE(f.admin
                  .Patch(Resource::Pods(), "tenant-team-a", "tessera-c1", finished,
                         k8s::PatchType::kMerge, "status")
                  .ok());
  int code = -1;
  ASSERT_TRUE(f.WaitExit(&code));
  EXPECT_EQ(code, 3);
  {
    std::lock_guard<std::mutex> lock(f.mu);
    EXPECT_EQ(f.info.finished_ms, 1763899207250);
  }
  auto inspected = f.backend->Inspect("C1");
  ASSERT_TRUE(inspected.ok());
  EXPECT_EQ(inspected->state, BackendState::kExited);
  EXPECT_EQ(inspected->started_ms, 1763899200000);
  EXPECT_EQ(inspected->finished_ms, 1763899207250);
  // The driver moves the lease to checking and starts the firmware check.
  testing::WaitUntil([&] { return f.LeaseState() == "checking"; });
  EXPECT_EQ(f.LeaseState(), "checking");
  ASSERT_TRUE(f.admin
                  .Patch(Resource::Jobs(), "tessera-system",
                         k8s::FirmwareCheckJobName("lease-tessera-c1"),
                         {{"status", {{"succeeded", 1}}}}, k8s::PatchType::kMerge, "status")
                  .ok());
  testing::WaitUntil([&] { return f.LeaseState() == "free"; });
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
  EXPECT_TRUE(f.backend->CheckIsolation(fleet::Isolation::kRunc, 0).ok());
  auto missing = f.backend->CheckIsolation(fleet::Isolation::kKata, 1);
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
  EXPECT_TRUE(f.backend->CheckIsolation(fleet::Isolation::kKata, 1).ok());
}

TEST(KubernetesBackend, TheExitComesFromThePodWatchWithoutGettingThePod) {
  Fixture f;
  StartRequest request;
  request.id = "C3";
  request.tenancy = "team-a";
  request.image = "busybox";
  ASSERT_TRUE(f.backend->Start(request, f.OnExit()).ok());
  // The watch is one request for every namespace, selected by this instance's label; once it
  // runs, only the watch may report.
  EXPECT_TRUE(testing::WaitUntil([&] { return PodWatchStarted(f.server); }, testing::kEventTimeout,
                                 std::chrono::milliseconds(50)))
      << f.server.Log().dump();
  f.server.ClearLog();
  f.FinishPod("tenant-team-a", "tessera-c3", "Succeeded", 0);
  int code = -1;
  ASSERT_TRUE(f.WaitExit(&code));
  EXPECT_EQ(code, 0);
  EXPECT_FALSE(f.info.failed);
  // No GET of the Pod: the exit came from the watch, not from polling.
  EXPECT_EQ(f.PodGets("tenant-team-a", "tessera-c3"), 0);
}

TEST(KubernetesBackend, APodWatchThatGets410RelistsAndStillSeesTheExit) {
  Fixture f;
  f.server.SetWatchSeconds(0.3);
  StartRequest request;
  request.id = "C4";
  request.tenancy = "team-a";
  request.image = "busybox";
  ASSERT_TRUE(f.backend->Start(request, f.OnExit()).ok());
  ASSERT_TRUE(testing::WaitUntil([&] { return PodWatchStarted(f.server); }, testing::kEventTimeout,
                                 std::chrono::milliseconds(50)));
  // History compacted while the Pod ends: the watch's resourceVersion is too old (410) and the
  // exit is only in the relist.
  f.server.ClearLog();
  f.server.Compact();
  f.FinishPod("tenant-team-a", "tessera-c4", "Failed", 9);
  int code = -1;
  ASSERT_TRUE(f.WaitExit(&code));
  EXPECT_EQ(code, 9);
  int relists = 0;
  for (const auto& entry : f.server.Log()) {
    std::string query = entry["query"];
    if (entry["method"] == "GET" && entry["path"] == "/api/v1/pods" &&
        query.find("watch=1") == std::string::npos)
      ++relists;
  }
  EXPECT_GE(relists, 1);
  EXPECT_EQ(f.PodGets("tenant-team-a", "tessera-c4"), 0);
}

TEST(KubernetesBackend, APodThatEndedBeforeItWasWatchedIsReportedAtOnce) {
  Fixture f;
  StartRequest request;
  request.id = "C5";
  request.tenancy = "team-a";
  request.image = "busybox";
  ASSERT_TRUE(f.backend->Start(request, [](const std::string&, const ExitInfo&) {}).ok());
  f.FinishPod("tenant-team-a", "tessera-c5", "Succeeded", 0);
  // A restarted service: a second backend finds the ended Pod and follows it.
  KubernetesBackendOptions options;
  options.client = f.Config();
  options.instance = "test";
  options.tenancy_controller = false;
  auto restarted = CreateKubernetesBackend(options);
  auto listed = restarted->List();
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  ASSERT_TRUE(restarted->Watch("C5", f.OnExit()).ok());
  int code = -1;
  ASSERT_TRUE(f.WaitExit(&code));
  EXPECT_EQ(code, 0);
}

TEST(KubernetesBackend, StopDeletesThePodAndItsVanishingIsAnExit) {
  Fixture f;
  StartRequest request;
  request.id = "C2";
  request.tenancy = "team-b";
  request.image = "busybox";
  ASSERT_TRUE(f.backend->Start(request, f.OnExit()).ok());
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
  const k8s::ClientConfig config = testing::PlainConfig(server);
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
  testing::WaitUntil([&] { return phase() == "Ready"; });
  EXPECT_EQ(phase(), "Ready");
  EXPECT_TRUE(admin.Get(Resource::Namespaces(), "", "tenant-team-c").ok());
  // Deleted behind the controller's back: the next resync recreates it.
  ASSERT_TRUE(admin.Delete(Resource::NetworkPolicies(), "tenant-team-c", "tenant-isolation").ok());
  EXPECT_TRUE(testing::WaitUntil([&] {
    return admin.Get(Resource::NetworkPolicies(), "tenant-team-c", "tenant-isolation").ok();
  }));
}

}  // namespace
}  // namespace tessera::backends

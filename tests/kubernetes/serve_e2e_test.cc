// A real tessera-serve process with --backend kubernetes against the scripted API server: a
// container submitted over the REST API becomes a GpuLease and a Pod in the tenant namespace
// (gVisor runtime class, GPU limit, node affinity); when the Pod ends, the service sees the exit
// code and the lease goes to checking with a firmware-check Job.
#include <gtest/gtest.h>

#include <fstream>

#include "backends/kubernetes/kubernetes_backend.h"
#include "kubernetes/fake_apiserver.h"
#include "serve/serve_process.h"

namespace tessera::testing {
namespace {

using k8s::Json;
using k8s::Resource;

TEST(ServeKubernetes, SubmittedContainerRunsAsAPodAndItsExitComesBack) {
  FakeApiServer api;
  TempDir dir;
  std::ofstream(dir.path() + "/kubeconfig")
      << "apiVersion: v1\nkind: Config\ncurrent-context: t\nclusters:\n- name: c\n  cluster:\n"
         "    server: "
      << api.url() << "\ncontexts:\n- name: t\n  context: {cluster: c}\n";
  k8s::ClientConfig config;
  config.server = api.url();
  k8s::Client admin(config);
  ASSERT_TRUE(admin
                  .Create(Resource::RuntimeClasses(), "",
                          {{"apiVersion", "node.k8s.io/v1"},
                           {"kind", "RuntimeClass"},
                           {"metadata", {{"name", "gvisor"}}},
                           {"handler", "runsc"}})
                  .ok());
  ServeProcess serve(dir.path(), {"--root", MaterializeHost("hgx-h100-dgx"), "--backend",
                                  "kubernetes", "--kubeconfig", dir.path() + "/kubeconfig",
                                  "--k8s-node", "gpu-node-1", "--cdi-dir", dir.path() + "/cdi"});
  std::string log;
  ASSERT_TRUE(serve.Start(&log)) << log;
  auto connection = serve.Connect(serve.admin_token());
  int status = 0;
  CallJson(*connection, "PUT", "/v1/tenancies/team-a", "{}", &status);
  ASSERT_EQ(status, 200);
  Json submitted = CallJson(
      *connection, "POST", "/v1/containers",
      R"({"image":"cuda","tenancy":"team-a","gpus":2,"isolation":"gvisor","command":["nvidia-smi"]})",
      &status);
  ASSERT_EQ(status / 100, 2) << submitted.dump();
  std::string id = submitted.value("id", "");
  ASSERT_FALSE(id.empty()) << submitted.dump();

  // The Pod, in the tenant namespace, as the backend built it.
  const std::string pod_name = backends::PodNameFor(id);
  Json pod;
  for (int i = 0; i < 100; ++i) {
    auto got = admin.Get(Resource::Pods(), "tenant-team-a", pod_name);
    if (got) {
      pod = *got;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(pod.is_object()) << ReadText(dir.path() + "/serve.log");
  EXPECT_EQ(pod["spec"]["runtimeClassName"], "gvisor");
  EXPECT_EQ(pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"], "2");
  EXPECT_EQ(
      pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
         ["nodeSelectorTerms"][0]["matchFields"][0]["values"][0],
      "gpu-node-1");
  auto lease = admin.Get(Resource::GpuLeases(), "", "lease-" + pod_name);
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ((*lease)["spec"]["gpuIds"].size(), 2u);

  // The kubelet's part, scripted: the container exits with 7.
  Json finished = {
      {"status",
       {{"phase", "Failed"},
        {"containerStatuses",
         Json::array({{{"name", "main"}, {"state", {{"terminated", {{"exitCode", 7}}}}}}})}}}};
  ASSERT_TRUE(admin
                  .Patch(Resource::Pods(), "tenant-team-a", pod_name, finished,
                         k8s::PatchType::kMerge, "status")
                  .ok());
  Json container;
  for (int i = 0; i < 200; ++i) {
    container = CallJson(*connection, "GET", "/v1/containers/" + id);
    if (container.is_object() && container["exit_code"].is_number() && container["exit_code"] == 7)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(container["exit_code"], 7) << container.dump();
  std::string state;
  for (int i = 0; i < 100 && state != "checking"; ++i) {
    auto l = admin.Get(Resource::GpuLeases(), "", "lease-" + pod_name);
    state = l ? (*l)["status"].value("state", "") : "";
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(state, "checking");
}

}  // namespace
}  // namespace tessera::testing

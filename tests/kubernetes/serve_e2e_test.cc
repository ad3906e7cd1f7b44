// A real tessera-serve process with --backend kubernetes against the scripted API server: the
// GPUs are those the Nodes publish (tessera.dev/gpus); a container submitted over the REST API is
// placed on a node by the placement policy and becomes a GpuLease and a Pod in the tenant
// namespace (gVisor runtime class, GPU limit, node affinity); when the Pod ends, the service sees
// the exit code and the lease goes to checking with a firmware-check Job.
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "backends/kubernetes/kubernetes_backend.h"
#include "inventory/inventory.h"
#include "kubernetes/fake_apiserver.h"
#include "serve/serve_process.h"
#include "support/wait.h"

namespace tessera::testing {
namespace {

using k8s::Json;
using k8s::Resource;

// The GPUs of a fixture host, as tessera-lease-sync publishes them.
k8s::NodeGpus FixtureGpus(const std::string& host) {
  inventory::ReadOptions read;
  read.root = MaterializeHost(host);
  auto inv = inventory::ReadInventory(read);
  EXPECT_TRUE(inv.ok());
  k8s::NodeGpus out;
  for (const auto* gpu : inv->Gpus())
    out.gpus.push_back({gpu->pci_address, gpu->gpu_uuid.value_or(""), gpu->model, gpu->numa_node,
                        gpu->upstream_bridges});
  return out;
}

void CreateNode(k8s::Client& admin, const std::string& name,
                const std::optional<k8s::NodeGpus>& gpus) {
  Json node = {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", name}}}};
  if (gpus)
    node["metadata"]["annotations"] = {{k8s::kNodeGpusAnnotation, k8s::NodeGpusAnnotation(*gpus)}};
  ASSERT_TRUE(admin.Create(Resource::Nodes(), "", node).ok());
}

// Waits until GET /v1/gpus lists `count` GPUs that are available.
Json WaitForGpus(client::Connection& connection, size_t count) {
  Json gpus;
  testing::WaitUntil([&] {
    gpus = CallJson(connection, "GET", "/v1/gpus").value("gpus", Json::array());
    size_t available = 0;
    if (gpus.is_array())
      for (const auto& gpu : gpus)
        if (gpu.value("available", false)) ++available;
    return available == count;
  });
  return gpus;
}

std::string WriteKubeconfig(const std::string& dir, const std::string& server) {
  std::ofstream(dir + "/kubeconfig")
      << "apiVersion: v1\nkind: Config\ncurrent-context: t\nclusters:\n- name: c\n  cluster:\n"
         "    server: "
      << server << "\ncontexts:\n- name: t\n  context: {cluster: c}\n";
  return dir + "/kubeconfig";
}

Json WaitForPod(k8s::Client& admin, const std::string& ns, const std::string& name) {
  Json pod;
  testing::WaitUntil([&] {
    auto got = admin.Get(Resource::Pods(), ns, name);
    if (got) pod = *got;
    return got.ok();
  });
  return pod;
}

std::string AffinityNode(const Json& pod) {
  return pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"][0]["matchFields"][0]["values"][0];
}

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
  // Two nodes publish the same board; --k8s-node restricts placement to one of them.
  CreateNode(admin, "gpu-node-1", FixtureGpus("hgx-h100-dgx"));
  CreateNode(admin, "gpu-node-2", FixtureGpus("hgx-h100-dgx"));
  ServeProcess serve(dir.path(), {"--root", MaterializeHost("hgx-h100-dgx"), "--backend",
                                  "kubernetes", "--kubeconfig", dir.path() + "/kubeconfig",
                                  "--k8s-node", "gpu-node-1", "--cdi-dir", dir.path() + "/cdi"});
  std::string log;
  ASSERT_TRUE(serve.Start(&log)) << log;
  auto connection = serve.Connect(serve.admin_token());
  Json gpus = WaitForGpus(*connection, 16);
  ASSERT_EQ(gpus.size(), 16u) << gpus.dump();
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
  Json pod = WaitForPod(admin, "tenant-team-a", pod_name);
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
  EXPECT_EQ((*lease)["spec"]["node"], "gpu-node-1");

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
  testing::WaitUntil([&] {
    container = CallJson(*connection, "GET", "/v1/containers/" + id);
    return container.is_object() && container["exit_code"].is_number() &&
           container["exit_code"] == 7;
  });
  EXPECT_EQ(container["exit_code"], 7) << container.dump();
  std::string state;
  testing::WaitUntil([&] {
    auto l = admin.Get(Resource::GpuLeases(), "", "lease-" + pod_name);
    state = l ? (*l)["status"].value("state", "") : "";
    return state == "checking";
  });
  EXPECT_EQ(state, "checking");
}

TEST(ServeKubernetes, PlacesAcrossNodesByBinpackAndNeverDoubleLeasesAcrossRestarts) {
  FakeApiServer api;
  TempDir dir;
  const std::string kubeconfig = WriteKubeconfig(dir.path(), api.url());
  k8s::ClientConfig config;
  config.server = api.url();
  k8s::Client admin(config);
  k8s::NodeGpus small;
  small.gpus = {{"0000:01:00.0", "GPU-a1", "NVIDIA L4", 0, {"0000:00:01.0"}},
                {"0000:02:00.0", "GPU-a2", "NVIDIA L4", 0, {"0000:00:02.0"}}};
  CreateNode(admin, "node-a", small);                        // 2 GPUs
  CreateNode(admin, "node-b", FixtureGpus("hgx-h100-dgx"));  // 8 GPUs
  CreateNode(admin, "node-c", std::nullopt);                 // publishes nothing
  std::vector<std::string> flags = {"--backend", "kubernetes", "--kubeconfig", kubeconfig};
  auto serve = std::make_unique<ServeProcess>(dir.path(), flags);
  std::string log;
  ASSERT_TRUE(serve->Start(&log)) << log;
  auto connection = serve->Connect(serve->admin_token());
  Json gpus = WaitForGpus(*connection, 10);
  ASSERT_EQ(gpus.size(), 10u) << gpus.dump();
  std::set<std::string> ids;
  for (const auto& gpu : gpus)
    ids.insert(gpu["id"].get<std::string>());
  EXPECT_TRUE(ids.count("0000:01:00.0@node-a")) << gpus.dump();
  int status = 0;
  CallJson(*connection, "PUT", "/v1/tenancies/team-a", "{}", &status);
  ASSERT_EQ(status, 200);

  // Submits and returns (node of the Pod's affinity, GPUs of its lease).
  std::set<std::string> leased;  // "<node>/<PCI>" over every lease
  auto submit = [&](int count) -> std::string {
    Json submitted = CallJson(
        *connection, "POST", "/v1/containers",
        R"({"image":"cuda","tenancy":"team-a","gpus":)" + std::to_string(count) + "}", &status);
    EXPECT_EQ(status / 100, 2) << submitted.dump();
    const std::string pod_name = backends::PodNameFor(submitted.value("id", ""));
    Json pod = WaitForPod(admin, "tenant-team-a", pod_name);
    EXPECT_TRUE(pod.is_object()) << serve->log();
    if (!pod.is_object()) return "";
    auto lease = admin.Get(Resource::GpuLeases(), "", "lease-" + pod_name);
    EXPECT_TRUE(lease.ok());
    if (!lease.ok()) return "";
    const std::string node = (*lease)["spec"]["node"];
    EXPECT_EQ(AffinityNode(pod), node);
    EXPECT_EQ((*lease)["metadata"]["labels"]["tessera.dev/node"], node);
    EXPECT_EQ((*lease)["spec"]["gpuIds"].size(), size_t(count));
    for (const auto& pci : (*lease)["spec"]["gpuIds"])
      EXPECT_TRUE(leased.insert(node + "/" + pci.get<std::string>()).second)
          << pci << " on " << node << " leased twice";
    return node;
  };
  // Binpack: the smaller whole node is broken first (the 8-GPU node stays whole), then filled.
  EXPECT_EQ(submit(1), "node-a");
  EXPECT_EQ(submit(1), "node-a");
  EXPECT_EQ(submit(2), "node-b");

  // A restart: the running containers keep their GPUs; new ones never get them.
  serve->Kill(SIGTERM);
  serve = std::make_unique<ServeProcess>(dir.path(), flags);
  ASSERT_TRUE(serve->Start(&log)) << log;
  connection = serve->Connect(serve->admin_token());
  gpus = WaitForGpus(*connection, 10);
  int held = 0;
  for (const auto& gpu : gpus) {
    std::string state = gpu["state"];
    if (state == "active" || state == "reserved") ++held;
  }
  EXPECT_EQ(held, 4) << gpus.dump();
  EXPECT_EQ(submit(1), "node-b");  // node-a is full
  EXPECT_EQ(submit(4), "node-b");
  EXPECT_EQ(leased.size(), 9u);

  // node-a goes away: its GPUs stay listed (and leased) but are no longer available.
  ASSERT_TRUE(admin.Delete(Resource::Nodes(), "", "node-a").ok());
  gpus = WaitForGpus(*connection, 8);
  ASSERT_EQ(gpus.size(), 10u);
  for (const auto& gpu : gpus)
    EXPECT_EQ(gpu["available"], gpu["node"] != "node-a") << gpu.dump();
}

}  // namespace
}  // namespace tessera::testing

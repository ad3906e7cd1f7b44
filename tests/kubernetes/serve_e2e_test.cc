// A real tessera-serve process with --backend kubernetes against the scripted API server: the
// GPUs are those the Nodes publish (tessera.dev/gpus); a container submitted over the REST API is
// placed on a node by the placement policy and becomes a GpuLease and a Pod in the tenant
// namespace (gVisor runtime class, GPU limit, node affinity); when the Pod ends, the service sees
// the exit code and the lease goes to checking with a firmware-check Job. With
// --k8s-gpu-api dra the Pod references a ResourceClaim pinned to the leased GPUs instead, and an
// allocation other than the lease fails the container.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "backends/kubernetes/claims.h"
#include "backends/kubernetes/kubernetes_backend.h"
#include "backends/kubernetes/node_gpus.h"
#include "backends/kubernetes/objects.h"
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
  WriteKubeconfigFile(dir + "/kubeconfig", server);
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
  WriteKubeconfigFile(dir.path() + "/kubeconfig", api.url());
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
  // The change's audit record is a ConfigMap in the control plane's namespace, read back
  // through the API.
  Json audit = CallJson(*connection, "GET", "/v1/audit?action=tenancy.put", "", &status);
  ASSERT_EQ(status, 200) << audit.dump();
  ASSERT_EQ(audit["records"].size(), 1u) << audit.dump();
  EXPECT_EQ(audit["records"][0]["tenancy"], "team-a");
  EXPECT_EQ(audit["records"][0]["token_id"], "admin");
  EXPECT_EQ(audit["records"][0]["result"], "ok");
  auto audit_maps =
      admin.List(Resource::ConfigMaps(), "tessera-system", "tessera.dev/audit-action=tenancy.put");
  ASSERT_TRUE(audit_maps.ok());
  EXPECT_EQ((*audit_maps)["items"].size(), 1u);
  // MIG slices are claimed through DRA on Kubernetes, not placed by the service.
  Json refused = CallJson(
      *connection, "POST", "/v1/containers",
      R"({"image":"cuda","tenancy":"team-a","mig":{"profile":"1g.10gb","count":1}})", &status);
  EXPECT_EQ(status, 400) << refused.dump();
  EXPECT_NE(refused.dump().find("mig: the kubernetes backend places whole GPUs"), std::string::npos)
      << refused.dump();
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
  // The scripted API server serves no discovery document: the device plugin, said in the log.
  EXPECT_NE(serve->log().find("GPU API device-plugin (API discovery failed"), std::string::npos)
      << serve->log();
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

// The test plays the scheduler: it writes the claim's allocation through /status.
void AllocateClaim(k8s::Client& admin, const std::string& ns, const std::string& claim,
                   const std::string& pool, const std::vector<std::string>& pci_addresses) {
  Json results = Json::array();
  for (const auto& pci : pci_addresses)
    results.push_back({{"request", k8s::kClaimRequestName},
                       {"driver", k8s::kDraDriver},
                       {"pool", pool},
                       {"device", k8s::DraDeviceName(pci)}});
  ASSERT_TRUE(admin
                  .Patch(k8s::ResourceClaims(), ns, claim,
                         {{"status", {{"allocation", {{"devices", {{"results", results}}}}}}}},
                         k8s::PatchType::kMerge, "status")
                  .ok());
}

std::vector<std::string> Strings(const Json& list) {
  std::vector<std::string> out;
  for (const auto& item : list)
    out.push_back(item.get<std::string>());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(ServeKubernetes, DraPinsTheLeasedGpusAndAnotherAllocationFailsTheContainer) {
  FakeApiServer api;
  TempDir dir;
  const std::string kubeconfig = WriteKubeconfig(dir.path(), api.url());
  k8s::ClientConfig config;
  config.server = api.url();
  k8s::Client admin(config);
  CreateNode(admin, "gpu-node-1", FixtureGpus("hgx-h100-dgx"));
  ServeProcess serve(dir.path(), {"--backend", "kubernetes", "--kubeconfig", kubeconfig,
                                  "--k8s-gpu-api", "dra", "--cdi-dir", dir.path() + "/cdi"});
  std::string log;
  ASSERT_TRUE(serve.Start(&log)) << log;
  auto connection = serve.Connect(serve.admin_token());
  ASSERT_EQ(WaitForGpus(*connection, 8).size(), 8u);
  EXPECT_NE(serve.log().find("GPU API dra (--k8s-gpu-api)"), std::string::npos) << serve.log();
  int status = 0;
  CallJson(*connection, "PUT", "/v1/tenancies/team-a", "{}", &status);
  ASSERT_EQ(status, 200);
  const std::string ns = "tenant-team-a";

  // Submits 2 GPUs and returns the container ID after checking what the backend created: a
  // claim pinned to the leased GPUs, recorded in the lease, and a Pod that references it.
  struct Submitted {
    std::string id, pod, lease;
    std::vector<std::string> gpus;
  };
  auto submit = [&]() -> Submitted {
    Json submitted = CallJson(
        *connection, "POST", "/v1/containers",
        R"({"image":"cuda","tenancy":"team-a","gpus":2,"command":["nvidia-smi"]})", &status);
    EXPECT_EQ(status / 100, 2) << submitted.dump();
    Submitted out;
    out.id = submitted.value("id", "");
    out.pod = backends::PodNameFor(out.id);
    out.lease = "lease-" + out.pod;
    Json pod = WaitForPod(admin, ns, out.pod);
    EXPECT_TRUE(pod.is_object()) << serve.log();
    if (!pod.is_object()) return out;
    auto lease = admin.Get(Resource::GpuLeases(), "", out.lease);
    EXPECT_TRUE(lease.ok());
    if (!lease) return out;
    out.gpus = Strings((*lease)["spec"]["gpuIds"]);
    EXPECT_EQ(out.gpus.size(), 2u);
    auto claim = admin.Get(k8s::ResourceClaims(), ns, out.lease);
    EXPECT_TRUE(claim.ok()) << serve.log();
    if (!claim) return out;
    const Json& exactly = (*claim)["spec"]["devices"]["requests"][0]["exactly"];
    EXPECT_EQ(exactly["deviceClassName"], k8s::kGpuDeviceClass);
    EXPECT_EQ(exactly["count"], 2);
    EXPECT_EQ(exactly["selectors"][0]["cel"]["expression"], k8s::PinnedSelector(out.gpus));
    EXPECT_EQ((*lease)["status"]["claim"]["name"], out.lease);
    EXPECT_EQ((*lease)["status"]["claim"]["uid"], (*claim)["metadata"]["uid"]);
    EXPECT_EQ(pod["spec"]["resourceClaims"][0]["resourceClaimName"], out.lease);
    const Json& resources = pod["spec"]["containers"][0]["resources"];
    EXPECT_EQ(resources["claims"][0]["name"], pod["spec"]["resourceClaims"][0]["name"]);
    EXPECT_FALSE(resources.contains("limits")) << resources.dump();
    EXPECT_EQ(AffinityNode(pod), "gpu-node-1");
    return out;
  };

  // Allocated exactly as leased: the container runs and exits; the firmware check covers
  // exactly those GPUs and the claim is deleted once the check has run.
  Submitted pinned = submit();
  ASSERT_FALSE(pinned.gpus.empty());
  AllocateClaim(admin, ns, pinned.lease, "gpu-node-1", pinned.gpus);
  testing::WaitUntil([&] {
    return serve.log().find("container " + pinned.id + ": claim allocated exactly") !=
           std::string::npos;
  });
  ASSERT_NE(serve.log().find("container " + pinned.id + ": claim allocated exactly"),
            std::string::npos)
      << serve.log();
  ASSERT_TRUE(admin
                  .Patch(Resource::Pods(), ns, pinned.pod, {{"status", {{"phase", "Running"}}}},
                         k8s::PatchType::kMerge, "status")
                  .ok());
  Json container;
  testing::WaitUntil([&] {
    container = CallJson(*connection, "GET", "/v1/containers/" + pinned.id);
    return container.value("state", "") == "running";
  });
  EXPECT_EQ(container["state"], "running") << container.dump();
  Json finished = {
      {"status",
       {{"phase", "Succeeded"},
        {"containerStatuses",
         Json::array({{{"name", "main"}, {"state", {{"terminated", {{"exitCode", 0}}}}}}})}}}};
  ASSERT_TRUE(
      admin.Patch(Resource::Pods(), ns, pinned.pod, finished, k8s::PatchType::kMerge, "status")
          .ok());
  testing::WaitUntil([&] {
    container = CallJson(*connection, "GET", "/v1/containers/" + pinned.id);
    return container.value("state", "") == "exited";
  });
  EXPECT_EQ(container["state"], "exited") << container.dump();
  EXPECT_EQ(container["exit_code"], 0) << container.dump();
  const std::string job_name = k8s::FirmwareCheckJobName(pinned.lease);
  Json job;
  testing::WaitUntil([&] {
    auto got = admin.Get(Resource::Jobs(), k8s::FirmwareCheckOptions{}.namespace_, job_name);
    if (got) job = *got;
    return got.ok();
  });
  ASSERT_TRUE(job.is_object()) << serve.log();
  std::vector<std::string> checked;
  const Json& command = job["spec"]["template"]["spec"]["containers"][0]["command"];
  for (size_t i = 0; i + 1 < command.size(); ++i)
    if (command[i] == "--gpu") checked.push_back(command[i + 1]);
  EXPECT_EQ(checked, pinned.gpus);
  EXPECT_TRUE(admin.Get(k8s::ResourceClaims(), ns, pinned.lease).ok());  // until the check ran
  ASSERT_TRUE(admin
                  .Patch(Resource::Jobs(), k8s::FirmwareCheckOptions{}.namespace_, job_name,
                         {{"status", {{"succeeded", 1}}}}, k8s::PatchType::kMerge, "status")
                  .ok());
  testing::WaitUntil([&] { return !admin.Get(k8s::ResourceClaims(), ns, pinned.lease).ok(); });
  EXPECT_FALSE(admin.Get(k8s::ResourceClaims(), ns, pinned.lease).ok());

  // Allocated another GPU than leased: the container fails with that reason before it runs,
  // and its Pod is deleted.
  Submitted other = submit();
  ASSERT_FALSE(other.gpus.empty());
  std::string stranger;
  for (const auto& gpu : FixtureGpus("hgx-h100-dgx").gpus) {
    if (std::find(other.gpus.begin(), other.gpus.end(), gpu.pci_address) == other.gpus.end() &&
        std::find(pinned.gpus.begin(), pinned.gpus.end(), gpu.pci_address) == pinned.gpus.end())
      stranger = gpu.pci_address;
  }
  ASSERT_FALSE(stranger.empty());
  AllocateClaim(admin, ns, other.lease, "gpu-node-1", {other.gpus[0], stranger});
  testing::WaitUntil([&] {
    container = CallJson(*connection, "GET", "/v1/containers/" + other.id);
    return container.value("state", "") == "failed";
  });
  EXPECT_EQ(container["state"], "failed") << container.dump() << serve.log();
  std::string reason = container.value("reason", "");
  EXPECT_NE(reason.find(k8s::DraDeviceName(stranger)), std::string::npos) << container.dump();
  EXPECT_NE(reason.find("the lease pins"), std::string::npos) << container.dump();
  auto pod = admin.Get(Resource::Pods(), ns, other.pod);
  ASSERT_FALSE(pod.ok());
  EXPECT_EQ(pod.error().category, ErrorCategory::kNotFound);
  auto lease = admin.Get(Resource::GpuLeases(), "", other.lease);
  ASSERT_TRUE(lease.ok());
  EXPECT_NE((*lease)["status"].value("reason", "").find("the lease pins"), std::string::npos)
      << lease->dump();
}

// The published ports' flags: tessera-serve refuses an ingress source that is no CIDR or label
// selector (naming the flag, before it serves) and a Service type Kubernetes has not, and starts
// with good ones.
TEST(ServeKubernetes, PublishedPortFlagsAreCheckedAtStart) {
  FakeApiServer api;
  TempDir dir;
  const std::string kubeconfig = WriteKubeconfig(dir.path(), api.url());
  const std::vector<std::string> base = {"--backend", "kubernetes",       "--kubeconfig",
                                         kubeconfig,  "--k8s-gpu-api",    "device-plugin",
                                         "--cdi-dir", dir.path() + "/cdi"};
  // One directory (and log) per process.
  auto own = [&](const std::string& name) {
    std::filesystem::create_directories(dir.path() + "/" + name);
    return dir.path() + "/" + name;
  };
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), base.begin(), base.end());
    return extra;
  };
  {
    ServeProcess serve(own("cidr"), with({"--publish-ingress-from", "10.0.0.0/33"}));
    std::string log;
    ASSERT_FALSE(serve.Start(&log));
    EXPECT_NE(serve.exit_status(), 0);
    EXPECT_NE(log.find("--publish-ingress-from \"10.0.0.0/33\""), std::string::npos) << log;
  }
  {
    ServeProcess serve(own("type"), with({"--publish-service-type", "ExternalName"}));
    std::string log;
    ASSERT_FALSE(serve.Start(&log));
    EXPECT_NE(log.find("--publish-service-type"), std::string::npos) << log;
  }
  ServeProcess serve(
      own("good"),
      with({"--publish-service-type", "LoadBalancer", "--publish-ingress-from", "203.0.113.0/24",
            "--publish-ingress-from", "kubernetes.io/metadata.name=ingress-nginx"}));
  std::string log;
  ASSERT_TRUE(serve.Start(&log)) << log;
}

}  // namespace
}  // namespace tessera::testing

// Every object the Kubernetes backend builds, validated strictly against Debian's
// python3-kubernetes models and against the CRDs' own OpenAPI v3 schemas
// (tests/tools/k8s/k8s_validate.py), plus the rules the builders themselves enforce.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "backends/kubernetes/objects.h"
#include "kubernetes/client.h"
#include "nodeagent/lease_file.h"
#include "support/fixture_host.h"

namespace tessera::k8s {
namespace {

namespace fs = std::filesystem;
using testing::RunCommand;
using testing::TempDir;

const std::vector<NfsEntitlement> kEntitlements = {
    {"datasets", "10.0.0.5", "/exports/datasets", true},
    {"scratch", "nfs.storage.example.com", "/exports/scratch", false},
};

std::string Validator() {
  return std::string("/usr/bin/python3 ") + TESSERA_SOURCE_DIR + "/tests/tools/k8s/k8s_validate.py";
}

// Runs the validator over `objects`; returns its output, status in *status.
std::string Validate(const Json& objects, int* status) {
  TempDir dir;
  fs::create_directories(dir.path() + "/crds");
  // JSON is YAML: the validator's CRD loader reads these as YAML documents.
  std::ofstream(dir.path() + "/crds/tenancy.yaml") << TenancyCrd().dump();
  std::ofstream(dir.path() + "/crds/gpulease.yaml") << GpuLeaseCrd().dump();
  std::ofstream(dir.path() + "/crds/gpucontainer.yaml") << GpuContainerCrd().dump();
  std::ofstream(dir.path() + "/objects.json") << objects.dump();
  return RunCommand(Validator() + " --crds " + dir.path() + "/crds --crds " + TESSERA_SOURCE_DIR +
                        "/tests/tools/k8s/crds " + dir.path() + "/objects.json 2>&1",
                    status);
}

Json AllObjects() {
  Json objects = Json::array();
  objects.push_back(BuildNamespace("team-a"));
  objects.push_back(BuildCiliumNetworkPolicy("team-a", kEntitlements));
  objects.push_back(BuildCiliumNetworkPolicy("team-b", {}));
  objects.push_back(BuildNetworkPolicy("team-a", kEntitlements));
  objects.push_back(BuildNetworkPolicy("team-b", {}));
  for (auto isolation : {Isolation::kRunc, Isolation::kGvisor, Isolation::kKata}) {
    for (auto mode : {NfsMode::kInline, NfsMode::kPersistentVolume}) {
      PodRequest request;
      request.tenancy = "team-a";
      request.name = "job-" + std::to_string(int(isolation)) + "-" + std::to_string(int(mode));
      request.image = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04";
      request.command = {"nvidia-smi"};
      request.env = {{"NCCL_DEBUG", "INFO"}};
      request.isolation = isolation;
      request.gpu_resource = isolation == Isolation::kKata ? "nvidia.com/pgpu" : "nvidia.com/gpu";
      request.gpus = 2;
      request.node = "gpu-node-1";
      request.lease_name = "lease-1";
      request.volumes = {{"datasets", "/data", false}, {"scratch", "/scratch", false}};
      request.nfs_mode = mode;
      auto pod = BuildPod(request, kEntitlements);
      EXPECT_TRUE(pod.ok());
      objects.push_back(*pod);
    }
  }
  for (const auto& e : kEntitlements) {
    objects.push_back(BuildNfsPersistentVolume("team-a", e));
    objects.push_back(BuildNfsPersistentVolumeClaim("team-a", e));
  }
  LeaseSpec lease{"lease-1",       "team-a", "gpu-node-1",    {"0000:18:00.0", "0000:2a:00.0"},
                  "tenant-team-a", "job-1",  "nvidia.com/gpu"};
  objects.push_back(BuildGpuLease(lease));
  objects.push_back(BuildTenancy("team-a", kEntitlements));
  objects.push_back(BuildFirmwareCheckJob(lease, FirmwareCheckOptions{}));
  objects.push_back(TenancyCrd());
  objects.push_back(GpuLeaseCrd());
  return objects;
}

TEST(Builders, EveryObjectValidatesAgainstModelsAndCrdSchemas) {
  Json objects = AllObjects();
  int status = -1;
  std::string out = Validate(objects, &status);
  EXPECT_EQ(status, 0) << out;
  // One "ok" line per object: nothing was skipped.
  size_t oks = 0;
  for (size_t at = 0; (at = out.find("ok ", at)) != std::string::npos; ++at)
    ++oks;
  EXPECT_EQ(oks, objects.size()) << out;
}

TEST(Builders, ValidatorRejectsWhatTheApiServerWould) {
  // Proves the validator is strict: an unknown Pod field, a missing container name, a lease
  // state outside the CRD's enum, and a Cilium rule with a misspelt key all fail.
  PodRequest request{"team-a", "p", "img"};
  Json pod = *BuildPod(request, {});
  Json unknown = pod;
  unknown["spec"]["containers"][0]["gpus"] = 1;
  Json unnamed = pod;
  unnamed["spec"]["containers"][0].erase("name");
  Json lease = BuildGpuLease({"l", "team-a", "n", {"0000:18:00.0"}, "ns", "p"});
  lease["status"] = {{"state", "borrowed"}};
  Json cnp = BuildCiliumNetworkPolicy("team-a", {});
  cnp["spec"]["egress"][0]["toEndpoint"] = Json::array();
  for (const Json& bad : {unknown, unnamed, lease, cnp}) {
    int status = -1;
    std::string out = Validate(Json::array({bad}), &status);
    EXPECT_EQ(status, 1) << bad.dump() << "\n" << out;
    EXPECT_NE(out.find("INVALID"), std::string::npos);
  }
}

TEST(Builders, RuntimeClassFollowsIsolation) {
  PodRequest request{"team-a", "p", "img"};
  request.isolation = Isolation::kRunc;
  EXPECT_FALSE(BuildPod(request, {})->at("spec").contains("runtimeClassName"));
  request.isolation = Isolation::kGvisor;
  EXPECT_EQ(BuildPod(request, {})->at("spec")["runtimeClassName"], "gvisor");
  request.isolation = Isolation::kKata;
  EXPECT_EQ(BuildPod(request, {})->at("spec")["runtimeClassName"], "kata-qemu-nvidia-gpu");
}

TEST(Builders, PodIsPinnedToThePlacedNodeWithGpuLimits) {
  PodRequest request{"team-a", "p", "img"};
  request.node = "gpu-node-7";
  request.gpus = 4;
  request.gpu_resource = "nvidia.com/pgpu";
  Json pod = *BuildPod(request, {});
  EXPECT_EQ(pod["metadata"]["namespace"], "tenant-team-a");
  EXPECT_EQ(pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/pgpu"], "4");
  EXPECT_EQ(
      pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
         ["nodeSelectorTerms"][0]["matchFields"][0]["values"][0],
      "gpu-node-7");
}

TEST(Builders, VolumesOutsideTheEntitlementsAreRefusedByName) {
  PodRequest request{"team-a", "p", "img"};
  request.volumes = {{"secrets-of-team-b", "/x", false}};
  auto pod = BuildPod(request, kEntitlements);
  ASSERT_FALSE(pod.ok());
  EXPECT_EQ(pod.error().category, ErrorCategory::kPermissionDenied);
  EXPECT_NE(pod.error().message.find("secrets-of-team-b"), std::string::npos);
  // A read-only entitlement wins over a read-write request.
  request.volumes = {{"datasets", "/data", false}};
  Json ok = *BuildPod(request, kEntitlements);
  EXPECT_EQ(ok["spec"]["volumes"][0]["nfs"]["readOnly"], true);
  EXPECT_EQ(ok["spec"]["containers"][0]["volumeMounts"][0]["readOnly"], true);
  request.nfs_mode = NfsMode::kPersistentVolume;
  EXPECT_EQ((*BuildPod(request,
                       kEntitlements))["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"],
            "datasets");
}

TEST(Builders, NetworkPoliciesAllowSameNamespaceDnsAndEntitledNfsOnly) {
  Json np = BuildNetworkPolicy("team-a", kEntitlements);
  const Json& egress = np["spec"]["egress"];
  ASSERT_EQ(egress.size(), 3u);  // same namespace, DNS, the one NFS server given by IP
  EXPECT_EQ(egress[1]["ports"][0]["port"], 53);
  EXPECT_EQ(egress[2]["to"][0]["ipBlock"]["cidr"], "10.0.0.5/32");
  EXPECT_EQ(egress[2]["ports"][0]["port"], 2049);
  EXPECT_EQ(np["metadata"]["annotations"]["tessera.dev/nfs-servers-not-allowed"],
            "nfs.storage.example.com");
  Json cnp = BuildCiliumNetworkPolicy("team-a", kEntitlements);
  const Json& cegress = cnp["spec"]["egress"];
  ASSERT_EQ(cegress.size(), 4u);
  EXPECT_EQ(cegress[2]["toCIDR"][0], "10.0.0.5/32");
  EXPECT_EQ(cegress[3]["toFQDNs"][0]["matchName"], "nfs.storage.example.com");
  EXPECT_EQ(cnp["spec"]["ingress"][0]["fromEndpoints"][0]["matchLabels"]
               ["k8s:io.kubernetes.pod.namespace"],
            "tenant-team-a");
  // Without entitlements: no storage rule at all.
  EXPECT_EQ(BuildNetworkPolicy("team-b", {})["spec"]["egress"].size(), 2u);
}

TEST(Builders, TenancyNamesMustFitTheNamespace) {
  EXPECT_EQ(*TenantNamespace("team-a"), "tenant-team-a");
  EXPECT_FALSE(TenantNamespace("Team_A").ok());
  EXPECT_FALSE(TenantNamespace(std::string(57, 'a')).ok());
  EXPECT_TRUE(TenantNamespace(std::string(56, 'a')).ok());
}

TEST(Builders, LeaseFileForOneNode) {
  Json a = BuildGpuLease({"a", "team-a", "node-1", {"0000:18:00.0"}, "ns", "p"});
  a["status"] = {{"state", "checking"}, {"reason", "pod p Succeeded"}};
  Json b = BuildGpuLease({"b", "team-b", "node-2", {"0000:2a:00.0"}, "ns", "q"});
  Json file = Json::parse(LeaseFileFor({{"items", {a, b}}}, "node-1"));
  EXPECT_EQ(file["version"], 1);
  EXPECT_EQ(file["gpus"].size(), 1u);
  EXPECT_EQ(file["gpus"]["0000:18:00.0"]["state"], "checking");
  EXPECT_EQ(file["gpus"]["0000:18:00.0"]["tenancy"], "team-a");
}

TEST(Builders, AFaultedLeaseIsQuarantinedInTheLeaseFile) {
  // Readers of version 1 (the device plugin, the DRA plugin) refuse unknown states.
  Json a = BuildGpuLease({"a", "team-a", "node-1", {"0000:18:00.0"}, "ns", "p"});
  a["status"] = {{"state", "faulted"}, {"reason", "gpu-fault: Xid 79"}};
  Json file = Json::parse(LeaseFileFor({{"items", {a}}}, "node-1"));
  EXPECT_EQ(file["gpus"]["0000:18:00.0"]["state"], "quarantined");
  EXPECT_EQ(file["gpus"]["0000:18:00.0"]["reason"], "gpu-fault: Xid 79");
}

TEST(Builders, FirmwareCheckJobIsPrivilegedOnTheLeaseNode) {
  LeaseSpec lease{"lease-with-a-rather-long-name-that-goes-on-and-on-and-on-forever",
                  "t",
                  "gpu-node-3",
                  {"0000:18:00.0"},
                  "ns",
                  "p"};
  Json job = BuildFirmwareCheckJob(lease, FirmwareCheckOptions{});
  EXPECT_LE(job["metadata"]["name"].get<std::string>().size(), 63u);
  const Json& spec = job["spec"]["template"]["spec"];
  EXPECT_EQ(spec["nodeName"], "gpu-node-3");
  EXPECT_EQ(spec["containers"][0]["securityContext"]["privileged"], true);
  EXPECT_EQ(spec["containers"][0]["command"].back(), "0000:18:00.0");
}

TEST(Builders, FirmwareCheckJobReadsTheNodeAgentsBaselines) {
  LeaseSpec lease{"lease-1", "t", "gpu-node-3", {"0000:18:00.0", "0000:2a:00.0"}, "ns", "p"};
  Json job = BuildFirmwareCheckJob(lease, FirmwareCheckOptions{});
  const Json& spec = job["spec"]["template"]["spec"];
  const Json& container = spec["containers"][0];
  EXPECT_EQ(container["command"], Json::array({"tessera", "gpu-check", "--root", "/host",
                                               "--baseline-dir", "/var/lib/tessera/firmware",
                                               "--gpu", "0000:18:00.0", "--gpu", "0000:2a:00.0"}));
  std::map<std::string, Json> mounts;
  for (const auto& mount : container["volumeMounts"])
    mounts[mount["name"].get<std::string>()] = mount;
  std::map<std::string, Json> volumes;
  for (const auto& volume : spec["volumes"])
    volumes[volume["name"].get<std::string>()] = volume;
  // The baselines: the host directory the node agent records into, read-only here.
  ASSERT_TRUE(mounts.count("firmware-baselines"));
  EXPECT_EQ(mounts["firmware-baselines"]["mountPath"], "/var/lib/tessera/firmware");
  EXPECT_EQ(mounts["firmware-baselines"]["readOnly"], true);
  EXPECT_EQ(volumes["firmware-baselines"]["hostPath"]["path"], "/var/lib/tessera/firmware");
  // The host's sysfs under --root, writable: a ROM is readable only after "1" is written.
  ASSERT_TRUE(mounts.count("sys"));
  EXPECT_EQ(mounts["sys"]["mountPath"], "/host/sys");
  EXPECT_FALSE(mounts["sys"].value("readOnly", false));
  EXPECT_EQ(volumes["sys"]["hostPath"]["path"], "/sys");
  EXPECT_EQ(volumes.size(), mounts.size());
}

}  // namespace
}  // namespace tessera::k8s

namespace tessera::k8s {
namespace {

// deploy/crds/*.yaml are these builders' output as YAML (the chart copies them). Set
// TESSERA_UPDATE_DEPLOY=1 to rewrite them after changing the CRDs.
TEST(Builders, DeployCrdsMatchTheBuilders) {
  for (const Json& crd : {TenancyCrd(), GpuLeaseCrd(), GpuContainerCrd()}) {
    std::string path = std::string(TESSERA_SOURCE_DIR) + "/deploy/crds/" +
                       crd["metadata"]["name"].get<std::string>() + ".yaml";
    TempDir dir;
    std::ofstream(dir.path() + "/crd.json") << crd.dump();
    if (std::getenv("TESSERA_UPDATE_DEPLOY")) {
      RunCommand(
          "/usr/bin/python3 -c 'import json,sys,yaml; print(\"# Generated from "
          "src/backends/kubernetes/crds.cc (TESSERA_UPDATE_DEPLOY=1 k8s_builders_test).\"); "
          "yaml.safe_dump(json.load(open(sys.argv[1])), sys.stdout, sort_keys=False)' " +
          dir.path() + "/crd.json > " + path);
    }
    int status = -1;
    std::string out = RunCommand(
        "/usr/bin/python3 -c 'import json,sys,yaml; a=json.load(open(sys.argv[1])); "
        "b=yaml.safe_load(open(sys.argv[2])); print(\"same\" if a==b else \"differ\")' " +
            dir.path() + "/crd.json " + path,
        &status);
    EXPECT_EQ(out, "same\n") << path << " is stale: run with TESSERA_UPDATE_DEPLOY=1";
  }
}

}  // namespace
}  // namespace tessera::k8s

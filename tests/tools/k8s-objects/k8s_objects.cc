// Prints every Kubernetes object the C++ code builds, one JSON object per line, so the schema
// validator (tests/tools/k8s-schema/validate.mjs) can check them against current Kubernetes
// schemas. Objects that depend on a host are built from the materialized fixture hosts.
// A new builder gets a line in one of the functions below (or a new function called from main);
// the validator finds the schema from apiVersion/kind, so nothing else needs to change.
//
// usage: k8s_objects   (stdout: JSON lines; exit 1 when a builder fails)
#include <iostream>
#include <nlohmann/json.hpp>

#include "backends/kubernetes/claims.h"
#include "backends/kubernetes/objects.h"
#include "backends/kubernetes/published.h"
#include "backends/kubernetes/state_objects.h"
#include "dra/dra.h"
#include "inventory/inventory.h"
#include "kubernetes/client.h"
#include "support/fixture_host.h"
#include "topology/topology.h"

namespace tessera {
namespace {

using nlohmann::json;

const std::vector<k8s::NfsEntitlement> kEntitlements = {
    {"datasets", "10.0.0.5", "/exports/datasets", true},
    {"scratch", "nfs.storage.example.com", "/exports/scratch", false},
};

void KubernetesBackendObjects(std::vector<json>& out) {
  out.push_back(k8s::BuildNamespace("team-a"));
  out.push_back(k8s::BuildCiliumNetworkPolicy("team-a", kEntitlements));
  out.push_back(k8s::BuildNetworkPolicy("team-a", kEntitlements));
  out.push_back(k8s::BuildNetworkPolicy("team-b", {}));
  for (auto isolation : {k8s::Isolation::kRunc, k8s::Isolation::kGvisor, k8s::Isolation::kKata}) {
    for (auto mode : {k8s::NfsMode::kInline, k8s::NfsMode::kPersistentVolume}) {
      k8s::PodRequest request;
      request.tenancy = "team-a";
      request.name = "job-" + std::to_string(int(isolation)) + "-" + std::to_string(int(mode));
      request.image = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04";
      request.command = {"nvidia-smi"};
      request.env = {{"NCCL_DEBUG", "INFO"}};
      request.isolation = isolation;
      request.gpu_resource =
          isolation == k8s::Isolation::kKata ? "nvidia.com/pgpu" : "nvidia.com/gpu";
      request.gpus = 2;
      request.node = "gpu-node-1";
      request.lease_name = "lease-1";
      request.volumes = {{"datasets", "/data", false}, {"scratch", "/scratch", false}};
      request.nfs_mode = mode;
      auto pod = k8s::BuildPod(request, kEntitlements);
      if (!pod) throw std::runtime_error("BuildPod: " + pod.error().message);
      out.push_back(*pod);
    }
  }
  for (const auto& e : kEntitlements) {
    out.push_back(k8s::BuildNfsPersistentVolume("team-a", e));
    out.push_back(k8s::BuildNfsPersistentVolumeClaim("team-a", e));
  }
  // DRA: the claim pinned to the leased GPUs (runc and Kata's vfio class) and the Pod that
  // references it instead of a GPU limit.
  for (bool vfio : {false, true}) {
    k8s::PinnedClaim claim{vfio ? "claim-kata" : "claim-runc",
                           "tenant-team-a",
                           "gpu-node-1",
                           {"0000:18:00.0", "0000:2a:00.0"},
                           vfio,
                           "lease-1"};
    out.push_back(k8s::BuildPinnedClaim(claim));
    k8s::PodRequest request;
    request.tenancy = "team-a";
    request.name = vfio ? "job-claimed-kata" : "job-claimed-runc";
    request.image = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04";
    request.command = {"nvidia-smi"};
    request.isolation = vfio ? k8s::Isolation::kKata : k8s::Isolation::kRunc;
    request.gpus = 2;
    request.node = "gpu-node-1";
    request.lease_name = "lease-1";
    request.resource_claim = claim.name;
    request.volumes = {{"datasets", "/data", false}};
    auto pod = k8s::BuildPod(request, kEntitlements);
    if (!pod) throw std::runtime_error("BuildPod (claim): " + pod.error().message);
    out.push_back(*pod);
  }
  k8s::LeaseSpec lease{"lease-1",       "team-a", "gpu-node-1",    {"0000:18:00.0", "0000:2a:00.0"},
                       "tenant-team-a", "job-1",  "nvidia.com/gpu"};
  out.push_back(k8s::BuildGpuLease(lease));
  // The status a DRA lease carries once its claim exists (what StartPod patches in).
  json claimed_lease = k8s::BuildGpuLease(lease);
  claimed_lease["status"] = {{"state", "active"},
                             {"reason", "pod tenant-team-a/job-1"},
                             {"claim", {{"name", "claim-runc"}, {"uid", "4f1c9a52-0d8e-4c1b"}}}};
  out.push_back(claimed_lease);
  out.push_back(k8s::BuildTenancy("team-a", kEntitlements));
  // The records of the cluster store (state_objects.h).
  fleet::Tenancy tenancy;
  tenancy.name = "team-a";
  tenancy.uid = "5e1f00aa11223344";
  tenancy.created_ms = 1763900000000;
  tenancy.labels = {{"team", "vision"}};
  out.push_back(k8s::TenancyObject(tenancy));
  fleet::ContainerRecord container;
  container.id = "c-0123456789abcdef";
  container.spec.image = "registry.example/team/app:1.2";
  container.spec.tenancy = "team-a";
  container.spec.gpus = 1;
  container.spec.command = {"python3", "train.py"};
  container.tenancy_uid = tenancy.uid;
  container.idempotency_key = "nightly-42";
  container.state = fleet::ContainerState::kRunning;
  container.started = true;
  container.gpus = {"0000:18:00.0@gpu-node-1"};
  container.created_ms = 1763900000100;
  container.started_ms = 1763900001200;
  container.spec.priority = 10;
  container.spec.max_duration_s = 7200;
  container.spec.preemptible = true;
  out.push_back(k8s::GpuContainerObject(container));
  container.spec.ports = {{8080, "http", "tcp"}, {5353, "", "udp"}};
  container.spec.ready = fleet::ReadinessProbe{"/healthz", 8080};
  container.published = {{8080, "tcp", "http", "10.96.0.12", 8080}, {5353, "udp", "", "", 0}};
  container.ready = false;
  out.push_back(k8s::GpuContainerObject(container));
  out.push_back(k8s::UsageConfigMap(fleet::UsageRecord{"c-00000000000000a1", "team-a", tenancy.uid,
                                                       2, 1763900000100, 1763900060100},
                                    "tessera-system"));
  out.push_back(k8s::TokenSecret(
      fleet::TokenRecord{"t-0011aabb", std::string(64, 'a'), "team-a", 1763900000700, tenancy.uid},
      "tessera-system"));
  out.push_back(k8s::AdminTokenSecret(std::string(64, 'b'), "tessera-system"));
  fleet::GpuRecord gpu;
  gpu.node = "gpu-node-1";
  gpu.pci_address = "0000:18:00.0";
  gpu.state = fleet::LeaseState::kActive;
  gpu.tenancy = "team-a";
  gpu.container_id = container.id;
  json gpus = k8s::GpuRecordsObject(gpu.node, "tessera-system");
  gpus["data"][k8s::GpuRecordKey(gpu.pci_address)] = k8s::GpuRecordText(gpu);
  out.push_back(gpus);
  out.push_back(k8s::BuildFirmwareCheckJob(lease, k8s::FirmwareCheckOptions{}));
  out.push_back(k8s::TenancyCrd());
  out.push_back(k8s::GpuLeaseCrd());
}

// Published ports: a Pod with ports and a readiness probe, its Service of each type, and the
// ingress policies for an operator's CIDRs and ingress controller namespace.
void PublishedPortObjects(std::vector<json>& out) {
  k8s::PodRequest request;
  request.tenancy = "team-a";
  request.name = "tessera-c-0123456789abcdef";
  request.image = "registry.example/team/web:1.0";
  request.gpus = 1;
  request.ports = {{8080, "http", "tcp"}, {5353, "", "udp"}};
  request.ready = k8s::HttpReadiness{"/healthz", 8080};
  auto pod = k8s::BuildPod(request, {});
  if (!pod) throw std::runtime_error("BuildPod (ports): " + pod.error().message);
  out.push_back(*pod);
  auto ingress = k8s::ParseIngressSources(
      {"203.0.113.0/24,2001:db8::/32", "kubernetes.io/metadata.name=ingress-nginx"});
  if (!ingress) throw std::runtime_error("ParseIngressSources: " + ingress.error().message);
  k8s::Publication publication{request.tenancy,
                               request.name,
                               {{"tessera.dev/instance", "tessera-control-plane"},
                                {"tessera.dev/container-id", "c-0123456789abcdef"}},
                               request.ports,
                               k8s::ServiceType::kClusterIP,
                               *ingress};
  for (auto type : {k8s::ServiceType::kClusterIP, k8s::ServiceType::kNodePort,
                    k8s::ServiceType::kLoadBalancer}) {
    publication.type = type;
    auto service = k8s::BuildService(publication);
    if (!service) throw std::runtime_error("BuildService: " + service.error().message);
    json owned = *service;
    owned["metadata"]["ownerReferences"] =
        json::array({k8s::PodOwnerReference(request.name, "4f1c9a52-0d8e-4c1b-9d7e-2a61c0ffee00")});
    out.push_back(owned);
  }
  out.push_back(k8s::BuildPublishedNetworkPolicy(publication));
  out.push_back(k8s::BuildPublishedCiliumNetworkPolicy(publication));
}

// The DRA plugin's ResourceSlice on a driver host (with NVLink partitions) and a VFIO host.
void DraObjects(std::vector<json>& out) {
  for (const char* fixture : {"hgx-h100-dgx", "hgx-h100-vfio"}) {
    inventory::ReadOptions read;
    read.root = testing::MaterializeHost(fixture);
    auto inv = inventory::ReadInventory(read);
    if (!inv) throw std::runtime_error(std::string(fixture) + ": " + inv.error().message);
    dra::NodeOptions options;
    options.partitions = topology::HgxH100Table();
    auto first = dra::DescribeNode(*inv, {});
    if (!first) throw std::runtime_error("DescribeNode: " + first.error().message);
    // Modules 1..8 in PCI order: any mapping gives each device its module and partitions.
    for (size_t i = 0; i < first->devices.size(); ++i)
      options.partitions->pci_addresses[int(i) + 1] = first->devices[i].pci_address;
    auto node = dra::DescribeNode(*inv, options);
    if (!node) throw std::runtime_error("DescribeNode: " + node.error().message);
    dra::SliceOptions slice;
    slice.node_name = std::string("node-") + fixture;
    slice.generation = 3;
    out.push_back(json::parse(
        dra::BuildResourceSlice(*node, dra::PublishedDevices(*node, dra::DeviceState{}), slice)));
  }
}

}  // namespace
}  // namespace tessera

int main() {
  try {
    std::vector<nlohmann::json> objects;
    tessera::KubernetesBackendObjects(objects);
    tessera::PublishedPortObjects(objects);
    tessera::DraObjects(objects);
    for (const auto& object : objects)
      std::cout << object.dump() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "k8s_objects: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

// ContainerBackend over the Kubernetes API (tessera serve --backend kubernetes): a container is
// a Pod in its tenancy's namespace with a GpuLease created first; exits come from one list+watch
// of the instance's Pods, and the lease then goes through the firmware-check Job to free or
// quarantined. A container with ports gets a Service (publication.h); Exposed reads it back.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/kubernetes/claims.h"
#include "backends/kubernetes/node_gpus.h"
#include "backends/kubernetes/objects.h"
#include "backends/kubernetes/published.h"
#include "kubernetes/client.h"

namespace tessera::backends {

struct KubernetesBackendOptions {
  k8s::ClientConfig client;
  std::string instance = "default";  // label tessera.dev/instance on everything it creates
  std::string node;                  // node the GPUs are on (node affinity); empty: any
  bool cilium = false;               // also create a CiliumNetworkPolicy per tenancy
  k8s::FirmwareCheckOptions firmware_check;
  // How often the GpuLease of an ended container is walked on (its firmware-check Job read).
  // Pods are never polled: their exits come from the Pod watch.
  std::chrono::milliseconds lease_interval{1000};
  // Run the tenancy controller: list+watch Tenancy objects and reconcile each (namespace,
  // network policies, NFS PV/PVCs in pv mode, status Ready); everything is relisted and
  // reconciled again every `tenancy_resync` to repair drift.
  bool tenancy_controller = true;
  k8s::NfsMode nfs_mode = k8s::NfsMode::kInline;
  std::chrono::milliseconds tenancy_resync{30000};
  // With several replicas: whether this one leads (only the leader reconciles tenancies; a new
  // leader catches up at its next resync). Unset: always.
  std::function<bool()> leading;
  // How Pods get their GPUs: an extended-resource limit (device plugin), or a ResourceClaim
  // pinned to the leased GPUs that the Pod references (DRA); a claim allocated anything else
  // fails the container.
  k8s::GpuApi gpu_api = k8s::GpuApi::kDevicePlugin;
  // Published ports: each such container's Service type (--publish-service-type), and where its
  // ports may be reached from beyond its tenancy (--publish-ingress-from; empty: nowhere).
  k8s::ServiceType publish_service_type = k8s::ServiceType::kClusterIP;
  k8s::IngressSources publish_ingress;
};

// The GPU API for --k8s-gpu-api `flag`; empty: dra when the cluster's API discovery (GET /apis)
// lists resource.k8s.io/v1, else device-plugin (also when discovery fails). Logs the choice.
Result<k8s::GpuApi> ChooseGpuApi(const k8s::ClientConfig& config, const std::string& flag);

std::unique_ptr<ContainerBackend> CreateKubernetesBackend(KubernetesBackendOptions options);

// Follows the cluster's Nodes (one list+watch, relisted on 410 Gone) and calls `on_change`, from
// its own thread, with every node that publishes GPUs (annotation tessera.dev/gpus) after each
// (re)list and whenever that set changes. A node whose annotation does not parse is left out
// (logged). Stops when destroyed.
class NodeGpuWatch {
 public:
  virtual ~NodeGpuWatch() = default;
};
std::unique_ptr<NodeGpuWatch> StartNodeGpuWatch(
    k8s::ClientConfig config, std::function<void(const std::vector<k8s::NodeGpus>&)> on_change);

// Pod name for a fleet container ID ("tessera-" + the ID lower-cased, DNS-1123 safe).
std::string PodNameFor(const std::string& id);

}  // namespace tessera::backends

// ContainerBackend over the Kubernetes API (tessera serve --backend kubernetes): a container is
// a Pod in its tenancy's namespace with a GpuLease created first; exits are found by polling the
// Pod, and the lease then goes through the firmware-check Job to free or quarantined.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "backends/backend.h"
#include "backends/kubernetes/kubernetes.h"

namespace tessera::backends {

struct KubernetesBackendOptions {
  k8s::ClientConfig client;
  std::string instance = "default";  // label tessera.dev/instance on everything it creates
  std::string node;                  // node the GPUs are on (node affinity); empty: any
  bool cilium = false;               // also create a CiliumNetworkPolicy per tenancy
  k8s::FirmwareCheckOptions firmware_check;
  std::chrono::milliseconds poll_interval{1000};
  // Run the tenancy controller: list+watch Tenancy objects and reconcile each (namespace,
  // network policies, NFS PV/PVCs in pv mode, status Ready); everything is relisted and
  // reconciled again every `tenancy_resync` to repair drift.
  bool tenancy_controller = true;
  k8s::NfsMode nfs_mode = k8s::NfsMode::kInline;
  std::chrono::milliseconds tenancy_resync{30000};
};

std::unique_ptr<ContainerBackend> CreateKubernetesBackend(KubernetesBackendOptions options);

// Pod name for a fleet container ID ("tessera-" + the ID lower-cased, DNS-1123 safe).
std::string PodNameFor(const std::string& id);

}  // namespace tessera::backends

// The objects tessera keeps in a cluster, built from values (pure: values in, JSON objects out):
// tenant Namespaces and their network policies, Pods, NFS volumes, GpuLeases, Tenancies,
// firmware-check Jobs, and the CRDs of group tessera.dev.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "kubernetes/client.h"

namespace tessera::k8s {

inline constexpr const char* kManagedBy = "app.kubernetes.io/managed-by";
inline constexpr const char* kTenancyLabel = "tessera.dev/tenancy";

enum class Isolation { kRunc, kGvisor, kKata };
Result<Isolation> ParseIsolation(std::string_view name);
// runc → none (cluster default), gvisor → "gvisor", kata → "kata-qemu-nvidia-gpu".
std::optional<std::string> RuntimeClassFor(Isolation isolation);

// An NFS export a tenancy may mount (issue 9's entitlement; to be unified with the embedded
// mode's type).
struct NfsEntitlement {
  std::string name;  // volume name submissions refer to
  std::string server;
  std::string path;
  bool read_only = false;
};

struct VolumeRequest {
  std::string name;  // an entitlement's name
  std::string mount_path;
  bool read_only = false;
};

enum class NfsMode { kInline, kPersistentVolume };  // --k8s-nfs-mode=inline|pv
Result<NfsMode> ParseNfsMode(std::string_view name);

// "tenant-<name>"; the name must be a DNS-1123 label that leaves room for the prefix.
Result<std::string> TenantNamespace(const std::string& tenancy);

Json BuildNamespace(const std::string& tenancy);
// Same-namespace ingress and egress only, plus egress to cluster DNS (kube-system
// kube-dns/coredns on 53/UDP+TCP) and to each entitled NFS server on 2049/TCP.
Json BuildCiliumNetworkPolicy(const std::string& tenancy,
                              const std::vector<NfsEntitlement>& entitlements);
Json BuildNetworkPolicy(const std::string& tenancy,
                        const std::vector<NfsEntitlement>& entitlements);

// A port the Pod's container serves on (containerPort, name, protocol), and its HTTP readiness
// probe (readinessProbe.httpGet).
struct ContainerPort {
  int port = 0;                  // 1..65535
  std::string name;              // optional: an IANA service name (at most 15 characters)
  std::string protocol = "tcp";  // tcp or udp
};
struct HttpReadiness {
  std::string path = "/";
  int port = 0;  // one of the container's ports
};

struct PodRequest {
  std::string tenancy;
  std::string name;  // pod name (DNS-1123 subdomain)
  std::string image;
  std::vector<std::string> command;
  std::map<std::string, std::string> env;
  Isolation isolation = Isolation::kRunc;
  std::string gpu_resource = "nvidia.com/gpu";  // or nvidia.com/pgpu (vfio)
  int gpus = 1;
  std::string node;        // from fleet placement
  std::string lease_name;  // the GpuLease that reserves the GPUs
  // DRA: the pinned ResourceClaim (same namespace) the Pod references instead of a GPU limit.
  std::string resource_claim;
  std::vector<VolumeRequest> volumes;
  NfsMode nfs_mode = NfsMode::kInline;
  std::vector<ContainerPort> ports;
  std::optional<HttpReadiness> ready;
};

// The Pod; volumes are checked against the entitlements (PermissionDenied naming the volume;
// a read-only entitlement forces read-only mounts). Ports and the readiness probe are checked
// (InvalidArgument naming the port or the probe).
Result<Json> BuildPod(const PodRequest& request, const std::vector<NfsEntitlement>& entitlements);
// PV/PVC pair for one entitlement (kPersistentVolume mode): PV "tessera-<tenancy>-<name>"
// bound by claimRef to PVC "<name>" in the tenant namespace.
Json BuildNfsPersistentVolume(const std::string& tenancy, const NfsEntitlement& entitlement);
Json BuildNfsPersistentVolumeClaim(const std::string& tenancy, const NfsEntitlement& entitlement);

// Lease states as in the node lease file contract.
inline constexpr const char* kLeaseStates[] = {"free",     "reserved",    "active",   "releasing",
                                               "checking", "quarantined", "draining", "faulted"};

struct LeaseSpec {
  std::string name;
  std::string tenancy;
  std::string node;
  std::vector<std::string> gpu_ids;  // PCI addresses
  std::string pod_namespace, pod_name;
  std::string resource = "nvidia.com/gpu";
  // status.allocatedDevices: what kubelet gave the Pod (PodResources, written by the node
  // agent), as PCI addresses where the node knows the device; empty until reported.
  std::vector<std::string> allocated_devices;
  // status.claim: the pinned ResourceClaim (DRA), once created.
  std::string claim_name, claim_uid;
};
Json BuildGpuLease(const LeaseSpec& lease);
Json BuildTenancy(const std::string& name, const std::vector<NfsEntitlement>& entitlements);

struct FirmwareCheckOptions {
  std::string namespace_ = "tessera-system";
  std::string image = "ghcr.io/tessera/tessera:latest";
  // The embedded mode's post-lease check, run on the node against the lease's GPUs; it gets
  // `--root <host_root> --baseline-dir <baseline_dir> --gpu <pci>...`.
  std::vector<std::string> command = {"tessera", "gpu-check"};
  // The host's sysfs is mounted at <host_root>/sys, read-write: the kernel shows an option ROM
  // only after "1" is written to its `rom` file.
  std::string host_root = "/host";
  // The baselines the node agent's init container recorded (`gpu-check --record --all`) before
  // any lease, mounted read-only from the same host path.
  std::string baseline_dir = "/var/lib/tessera/firmware";
};
// A privileged Job pinned to the lease's node that checks the lease's GPUs (exit 0 = healthy).
Json BuildFirmwareCheckJob(const LeaseSpec& lease, const FirmwareCheckOptions& options);
std::string FirmwareCheckJobName(const std::string& lease_name);

Json TenancyCrd();
Json GpuLeaseCrd();
Json GpuContainerCrd();

// The devices a lease's firmware check covers: the leased ones and whatever kubelet gave the Pod
// (sorted, unique), so a GPU the Pod used without the lease naming it is checked too.
std::vector<std::string> DevicesToCheck(const LeaseSpec& lease);

}  // namespace tessera::k8s

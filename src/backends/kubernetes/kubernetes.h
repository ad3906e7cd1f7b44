// The Kubernetes backend: a small typed API client (HTTP/1.1 over Boost.Beast), builders for every
// object tessera creates (pure: values in, JSON objects out), the CRDs of group tessera.dev, and
// the tenancy and GPU lease controllers that drive them through the API server.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace tessera::k8s {

using Json = nlohmann::json;

// ---------------------------------------------------------------- client configuration

struct RetryPolicy {
  int max_attempts = 5;  // 429 and 5xx (and connection failures) are retried
  std::chrono::milliseconds initial_backoff{200};
  std::chrono::milliseconds max_backoff{10000};  // also caps a server's Retry-After
};

struct ClientConfig {
  std::string server;  // "https://10.0.0.1:6443"
  // TLS: the CA as PEM data (kubeconfig certificate-authority-data) or a file.
  std::string ca_pem;
  std::string ca_file;
  bool insecure_skip_tls_verify = false;
  std::string tls_server_name;  // name to verify (and send as SNI) instead of the server's host
  // Authentication: a bearer token (or a file re-read per request: service-account tokens
  // rotate), and/or a client certificate and key (PEM data or files).
  std::string bearer_token;
  std::string token_file;
  std::string client_cert_pem, client_key_pem;
  std::string client_cert_file, client_key_file;
  std::string user_agent = "tessera";
  std::chrono::milliseconds timeout{30000};  // per request (not for watches)
  // One call with its retries (0: only timeout and retry.max_attempts bound it).
  std::chrono::milliseconds total_timeout{0};
  RetryPolicy retry;
  // Response bodies beyond these are refused while they are read, never buffered: one object
  // (etcd stores at most 1.5 MiB per object; its JSON is larger than its protobuf), and a list
  // (also the watch event limit is the object one).
  uint64_t max_object_bytes = uint64_t{4} << 20;
  uint64_t max_list_bytes = uint64_t{128} << 20;
};

// How deep an API server's JSON may nest. Objects nest a dozen levels (a CRD's schema some
// more); a body or watch event deeper than this is refused before it is parsed, since a walk or
// dump() of a value nested 100,000 deep overflows the stack.
inline constexpr int kMaxApiJsonDepth = 64;

// Per-call bounds that override the configuration's (0: the configuration's).
struct CallLimits {
  uint64_t max_body_bytes = 0;
  std::chrono::milliseconds total_timeout{0};
};

// Parses kubeconfig YAML: current-context (or `context` when given) → cluster server, CA
// (data or file, relative to `base_dir`), insecure-skip-tls-verify, tls-server-name; user token,
// tokenFile, client-certificate(-data), client-key(-data). Names the missing entry on error.
Result<ClientConfig> ParseKubeconfig(std::string_view yaml, const std::string& base_dir,
                                     const std::string& context = "");
// Reads the file then ParseKubeconfig with its directory as base.
Result<ClientConfig> LoadKubeconfig(const std::string& path, const std::string& context = "");
// In-cluster: KUBERNETES_SERVICE_HOST/PORT and the service account's token and ca.crt.
Result<ClientConfig> InClusterConfig(
    const std::string& service_account_dir = "/var/run/secrets/kubernetes.io/serviceaccount");

// ---------------------------------------------------------------- resources and client

// An API resource: where it lives and whether it is namespaced.
struct Resource {
  std::string api_path;  // "/api/v1" or "/apis/<group>/<version>"
  std::string plural;    // "pods"
  bool namespaced = true;

  // "/api/v1/namespaces/ns/pods[/name]" (namespace ignored for cluster-scoped resources).
  std::string Path(const std::string& ns, const std::string& name = "") const;

  static Resource Namespaces();
  static Resource Pods();
  static Resource NetworkPolicies();
  static Resource CiliumNetworkPolicies();
  static Resource PersistentVolumes();
  static Resource PersistentVolumeClaims();
  static Resource Jobs();
  static Resource Tenancies();
  static Resource GpuLeases();
  static Resource GpuContainers();
  static Resource Leases();  // coordination.k8s.io/v1
  static Resource Secrets();
  static Resource ConfigMaps();
  static Resource CustomResourceDefinitions();
  static Resource RuntimeClasses();
  static Resource Nodes();
};

enum class PatchType { kMerge, kStrategicMerge, kJson };

// What a failed request said: HTTP status and the Status object's reason/message.
struct ApiError {
  long http_status = 0;
  std::string reason;  // Status.reason: "NotFound", "AlreadyExists", "Conflict", "Expired"...
  std::string message;
};

// A watch event: type ADDED/MODIFIED/DELETED/BOOKMARK; SYNC is sent by ListWatch once per
// (re)list with `object` = the whole list, so handlers can rebuild state after 410 Gone.
struct WatchEvent {
  std::string type;
  Json object;
};

class HttpTransport;

class Client {
 public:
  explicit Client(ClientConfig config);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Errors carry categories: 404 NotFound, 409 AlreadyExists (create) or FailedPrecondition
  // (conflict), 400/422 InvalidArgument, 401/403 PermissionDenied, 429/5xx after retries and
  // connection failures Unavailable. last_error() holds the HTTP details of the last failure.
  // Calls on several threads run at once: each takes a connection of its own, and no lock is
  // held while one waits on the network.
  Result<Json> Create(const Resource& resource, const std::string& ns, const Json& object);
  Result<Json> Get(const Resource& resource, const std::string& ns, const std::string& name,
                   const CallLimits& limits = {});
  // GET of one object's JSON as the server sent it, unparsed, for callers that check and parse
  // it themselves (its nesting is not checked here).
  Result<std::string> GetBytes(const Resource& resource, const std::string& ns,
                               const std::string& name, const CallLimits& limits = {});
  Result<Json> Replace(const Resource& resource, const std::string& ns, const std::string& name,
                       const Json& object);
  Result<Json> Patch(const Resource& resource, const std::string& ns, const std::string& name,
                     const Json& patch, PatchType type = PatchType::kMerge,
                     const std::string& subresource = "");
  Status Delete(const Resource& resource, const std::string& ns, const std::string& name,
                std::optional<int> grace_seconds = std::nullopt);
  // GET of a non-JSON body (pod logs): the text as the server sent it.
  Result<std::string> GetText(const std::string& path);
  Result<Json> List(const Resource& resource, const std::string& ns,
                    const std::string& label_selector = "", const std::string& field_selector = "");

  // One watch request from `resource_version`: calls `on_event` per event until the server
  // ends the stream (returns Ok with *last_version updated), the handler returns false or
  // `stop` is set (Ok), or the server says 410 Gone (FailedPrecondition, api_error 410).
  // An empty `ns` of a namespaced resource watches every namespace.
  Status WatchOnce(const Resource& resource, const std::string& ns,
                   const std::string& resource_version, const std::string& field_selector,
                   const std::function<bool(const WatchEvent&)>& on_event,
                   const std::atomic<bool>* stop, std::string* last_version,
                   const std::string& label_selector = "");

  // List then watch forever (until `stop` or the handler returns false): reconnects when the
  // stream ends, relists on 410 Gone, backs off on errors. Emits SYNC after every list.
  Status ListWatch(const Resource& resource, const std::string& ns,
                   const std::string& field_selector,
                   const std::function<bool(const WatchEvent&)>& on_event,
                   const std::atomic<bool>* stop, const std::string& label_selector = "");

  // The last failure of any thread's call.
  ApiError last_error() const;
  const ClientConfig& config() const { return config_; }

 private:
  struct Response;
  Result<Json> Call(const std::string& method, const std::string& path, const Json* body,
                    const std::string& content_type, bool creating, const CallLimits& limits);
  // The 2xx body of a request, or the error its status maps to (recorded as last_error).
  Result<std::string> CallBytes(const std::string& method, const std::string& path,
                                const Json* body, const std::string& content_type, bool creating,
                                const CallLimits& limits);
  Result<Response> Send(const std::string& method, const std::string& path, const std::string& body,
                        const std::string& content_type, const CallLimits& limits);
  void SetLastError(ApiError error);
  Status WatchOnce(const Resource& resource, const std::string& ns,
                   const std::string& resource_version, const std::string& field_selector,
                   const std::function<bool(const WatchEvent&)>& on_event,
                   const std::atomic<bool>* stop, std::string* last_version,
                   const std::string& label_selector, long* http_status);
  // Authorization (the token file is re-read: service-account tokens rotate), Accept,
  // User-Agent and, with a body, Content-Type.
  Result<std::vector<std::pair<std::string, std::string>>> Headers(
      const std::string& content_type) const;

  ClientConfig config_;
  mutable std::mutex last_error_mu_;
  ApiError last_error_;                       // guarded by last_error_mu_
  std::unique_ptr<HttpTransport> transport_;  // null when the server URL is unusable
  Error transport_error_;
};

// ---------------------------------------------------------------- reading the server's JSON

// Typed reads of objects from the API server that never throw, whatever shape its JSON has
// (nlohmann's operator[] and value() throw on a type they did not expect).
// object[key] when `object` is an object holding a string there, else `fallback`.
std::string StringField(const Json& object, std::string_view key, std::string_view fallback = "");
// object[key] when it is an object (an array), else an empty one.
const Json& ObjectField(const Json& object, std::string_view key);
const Json& ArrayField(const Json& object, std::string_view key);

// ---------------------------------------------------------------- builders (pure)

struct NodeGpus;

inline constexpr const char* kGroup = "tessera.dev";
inline constexpr const char* kVersion = "v1alpha1";
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
};

// The Pod; volumes are checked against the entitlements (PermissionDenied naming the volume;
// a read-only entitlement forces read-only mounts).
Result<Json> BuildPod(const PodRequest& request, const std::vector<NfsEntitlement>& entitlements);
// PV/PVC pair for one entitlement (kPersistentVolume mode): PV "tessera-<tenancy>-<name>"
// bound by claimRef to PVC "<name>" in the tenant namespace.
Json BuildNfsPersistentVolume(const std::string& tenancy, const NfsEntitlement& entitlement);
Json BuildNfsPersistentVolumeClaim(const std::string& tenancy, const NfsEntitlement& entitlement);

// Lease states as in the node lease file contract.
inline constexpr const char* kLeaseStates[] = {"free",     "reserved",    "active",  "releasing",
                                               "checking", "quarantined", "draining"};

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

// The node lease file (/run/tessera/leases.json) for `node` from a GpuLease list. The file is
// keyed by canonical PCI address, so only those reach it: an ID in spec.gpuIds that is not one
// is written as the GPU the node's inventory (`known`) gives that UUID, or left out with a
// warning naming the lease; gpuIds that is not a list, or a state that is not a lease state,
// leaves the lease out with a warning. Reasons, tenancies and claim UIDs are written as
// bounded excerpts.
std::string LeaseFileFor(const Json& gpu_lease_list, const std::string& node,
                         const NodeGpus* known = nullptr,
                         std::vector<std::string>* warnings = nullptr);

// ---------------------------------------------------------------- node GPU inventory

// The node agent publishes its node's GPUs on the Node object under this annotation (compact
// JSON, see NodeGpusAnnotation); the control plane places across every node that has it.
inline constexpr const char* kNodeGpusAnnotation = "tessera.dev/gpus";

struct NodeGpu {
  std::string pci_address;  // "0000:18:00.0": with the node name, the GPU's identity
  std::string uuid;         // "GPU-…" when the NVIDIA driver reports one, else empty
  std::string model;
  int numa_node = -1;
  std::vector<std::string> upstream_bridges;  // nearest first: same-switch scoring
  friend bool operator==(const NodeGpu&, const NodeGpu&) = default;
};

struct NodeGpus {
  std::string node;           // the Node's name (not in the annotation itself)
  std::vector<NodeGpu> gpus;  // PCI order = topology index on the node
  // The node's NVLink fabric partition table (as topology::ParsePartitionTable reads it, with
  // this node's module ID -> PCI address map), when it runs in partition mode; null otherwise.
  Json partition_table;
  friend bool operator==(const NodeGpus&, const NodeGpus&) = default;
};

// {"version":1,"gpus":[{"pci":…,"uuid":…,"model":…,"numa":…,"bridges":[…]}],"partitionTable":…}
// dumped compactly with sorted keys, so equal inventories give equal text.
std::string NodeGpusAnnotation(const NodeGpus& gpus);
// Parses the annotation; errors name the field ("gpus[2].pci: missing").
Result<NodeGpus> ParseNodeGpusAnnotation(std::string_view text);
// The GPUs a Node object publishes: nullopt without the annotation; an error names the node.
Result<std::optional<NodeGpus>> NodeGpusOf(const Json& node);
// The merge patch that sets the annotation on a Node.
Json NodeGpusPatch(const std::string& annotation);
// kubelet device IDs as the device plugin advertises them (GPU UUID or PCI address, replicas
// "<id>::<n>") -> the node's PCI addresses, sorted and unique. An ID the node does not know is
// kept as it is, so that it still shows as a difference from the lease.
std::vector<std::string> PciAddressesOfDeviceIds(const std::vector<std::string>& ids,
                                                 const NodeGpus& gpus);

// ---------------------------------------------------------------- controllers

// The devices a lease's firmware check covers: the leased ones and whatever kubelet gave the Pod
// (sorted, unique), so a GPU the Pod used without the lease naming it is checked too.
std::vector<std::string> DevicesToCheck(const LeaseSpec& lease);
// Empty when kubelet's allocation matches the lease (or was not reported), else the reason
// naming both sides.
std::string AllocationDifference(const LeaseSpec& lease);

// Creates or repairs one object: GET; 404 → POST; otherwise compares the fields tessera owns
// (labels, spec, data) and PUTs the desired object over the live one when they drifted,
// retrying a 409 conflict with a fresh GET. Returns what is live afterwards.
Result<Json> EnsureObject(Client& client, const Resource& resource, const std::string& ns,
                          const Json& desired);

// Namespace, CiliumNetworkPolicy (when `cilium`), NetworkPolicy, NFS PV/PVCs (pv mode), then
// status.phase = Ready. Idempotent.
struct TenancyControllerOptions {
  bool cilium = true;
  NfsMode nfs_mode = NfsMode::kInline;
};
Status ReconcileTenancy(Client& client, const Json& tenancy,
                        const TenancyControllerOptions& options);

// DRA: creates (or finds) request.resource_claim in `ns`, pinned to the lease's GPUs (the vfio
// class under Kata), and records its name and UID in the lease's status.claim. A failure frees
// the lease with the reason. Returns the live claim.
Result<Json> CreatePinnedClaim(Client& client, const PodRequest& request, const LeaseSpec& lease,
                               const std::string& ns);

// DRA: what the scheduler made of a lease's pinned claim. nullopt while the lease has no claim
// or the claim is not allocated (or gone); else the reason the allocation differs from the
// lease (unreadable included), empty when it is exactly the leased GPUs.
Result<std::optional<std::string>> PinnedClaimMismatch(Client& client, const Json& lease);

// Submission → GpuLease (reserved, owned by the control plane) → Pod → lease active. With
// request.resource_claim (DRA), a ResourceClaim pinned to the leased GPUs is created before the
// Pod and recorded in the lease's status.claim {name, uid}.
Result<Json> StartPod(Client& client, const PodRequest& request,
                      const std::vector<NfsEntitlement>& entitlements, const LeaseSpec& lease);

// One step of the lease state machine, from the lease and what the cluster says:
// active + pod finished/missing → checking + firmware-check Job; checking + Job succeeded →
// free; checking + Job failed → quarantined. Returns the lease's state afterwards. With a
// pinned claim: an allocation other than the leased GPUs deletes the Pod and is recorded as the
// reason; the check runs on exactly the allocated GPUs; the claim is deleted after the check.
Result<std::string> ReconcileLease(Client& client, const Json& lease,
                                   const FirmwareCheckOptions& options);

}  // namespace tessera::k8s

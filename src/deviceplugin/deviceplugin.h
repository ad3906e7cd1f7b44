// The Kubernetes device plugin's resource manager: which resources a node advertises (from the
// inventory and naming rules), their device IDs and replicas, health (presence, GPU faults,
// leases), Allocate outputs and preferred allocations. No gRPC here: server.h speaks the kubelet
// protocol over this, and tests drive it without a socket.
//
// Thread safety: ResourceManager is shared by the gRPC handler threads and the agent's event
// loop; its mutable health state is guarded by one mutex (see the class).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "cdi/cdi.h"
#include "common/error.h"
#include "health/health.h"
#include "inventory/inventory.h"
#include "topology/topology.h"

namespace tessera::windows {
struct Snapshot;
}

namespace tessera::deviceplugin {

// ---------------------------------------------------------------------------------------------
// Configuration (docs/device-plugin.md). Parsed once at the edge: file, then env, then flags.

// What Allocate puts into a container response; several may be selected.
enum class ListStrategy {
  kCdiCri,          // cdi_devices (field 5) with fully qualified CDI names
  kCdiAnnotations,  // cdi.k8s.io/<plugin>_<id> annotation
  kDeviceSpecs,     // DeviceSpecs + mounts + env (containerd 1.6 has no CDI)
  kEnvvar,          // NVIDIA_VISIBLE_DEVICES
};
const char* ListStrategyName(ListStrategy strategy);
Result<ListStrategy> ParseListStrategy(std::string_view name);

// How MIG devices are advertised (NVIDIA's device plugin strategies): none = whole GPUs only;
// single = every MIG device as nvidia.com/gpu (all MIG GPUs must hold one profile); mixed =
// nvidia.com/mig-<profile> per profile ('+' written '.'), GPUs with MIG off as nvidia.com/gpu.
enum class MigStrategy { kNone, kSingle, kMixed };
const char* MigStrategyName(MigStrategy strategy);
Result<MigStrategy> ParseMigStrategy(std::string_view name);

// How replicas of shared devices are preferred.
enum class AllocationPolicy { kDistributed, kPacked };
const char* AllocationPolicyName(AllocationPolicy policy);
Result<AllocationPolicy> ParseAllocationPolicy(std::string_view name);

// A naming rule: devices matching every given criterion are advertised under `name`. Rules are
// tried in order before the built-in defaults; `{model}` in the name becomes the model with
// every run of characters outside [A-Za-z0-9] replaced by '_' (GH100 [H100 SXM5 80GB] ->
// GH100_H100_SXM5_80GB).
struct NamingRule {
  std::string name;
  std::optional<uint16_t> vendor_id;
  std::optional<uint16_t> device_id;
  std::string model;   // glob (fnmatch) on the pci.ids model name; empty = any
  std::string driver;  // exact bound driver; empty = any
  std::string kind;    // "gpu", "accelerator", "nvswitch"; empty = gpu or accelerator
};

struct SharedResource {
  std::string name;    // resource whose devices are shared
  int replicas = 2;    // >= 2
  std::string rename;  // advertised name; empty = name (or name + ".shared" by default)
};

// MPS replicas (NVIDIA's `sharing.mps`): each GPU of the resources gets a tessera-owned MPS
// daemon whose limits are the GPU's memory and threads over its replicas; a container takes one
// replica. Refused for MIG devices.
struct MpsSharing {
  std::vector<SharedResource> resources;
  bool rename_by_default = false;
  std::string root = "/run/tessera/mps";  // <root>/<uuid>/{pipe,log,shm,ready}
  std::string control_binary = "nvidia-cuda-mps-control";
  uint64_t shm_bytes = uint64_t{64} << 20;
  // How long Allocate waits for a GPU's daemon to be ready under the current config before it
  // refuses (kubelet retries).
  int ready_timeout_ms = 30000;
  int check_interval_ms = 1000;   // how often each daemon is checked
  int command_timeout_ms = 5000;  // a daemon slower than this to answer counts as hung
};

struct SharingConfig {
  // Time-slicing (`sharing.timeSlicing`).
  std::vector<SharedResource> resources;
  bool rename_by_default = false;
  bool fail_requests_greater_than_one = false;
  MpsSharing mps;
};

struct HealthConfig {
  bool enabled = true;
  int poll_interval_ms = 200;  // sysfs raises no inotify events for kernel-made changes
  bool nvml = true;
  std::string nvml_library = "libnvidia-ml.so.1";  // dlopen()ed at run time only
  // Xids never acted on, on top of the fault table (whose application class already covers the
  // Xids applications cause: 13, 31, 43, 45).
  std::set<uint64_t> ignored_xids;
  // GPU faults (docs/faults.md): the operator's table file over the built-in one (empty: the
  // built-in table alone).
  std::string fault_table;
  // argv of the reset and of the self-test; "{uuid}", "{pci}" and "{index}" are replaced. An
  // empty reset: a faulted GPU stays out; an empty self-test: verification by NVML state only.
  std::vector<std::string> reset_command = {"nvidia-smi", "-r", "-i", "{uuid}"};
  std::vector<std::string> self_test_command;
  // kubelet's PodResources socket: names the Pods of a faulted GPU, and a reset waits until none
  // holds it. Empty: Pods are not consulted (the reset waits for NVML to see no process).
  std::string pod_resources_socket = "/var/lib/kubelet/pod-resources/kubelet.sock";
  // Each GPU's fault history and recovery step, so a restart does not forget a faulted GPU (not
  // in the socket dir: kubelet deletes every file there when it starts).
  std::string state_file = "/var/lib/tessera/device-plugin/gpu-health.json";
  int recovery_interval_ms = 1000;  // how often a faulted GPU's recovery is looked at
};

struct TopologyConfig {
  std::string partition_table;         // preset name (hgx-h100-8gpu) or a YAML/JSON file path
  std::map<int, std::string> modules;  // module ID -> PCI address, added to the table's map
};

struct Config {
  std::string root = "/";
  std::string socket_dir = "/var/lib/kubelet/device-plugins";
  std::string cdi_dir = "/var/run/cdi";
  bool write_cdi_specs = true;  // write the specs the cdi-* strategies name into cdi_dir
  std::string lease_file = "/run/tessera/leases.json";
  std::vector<ListStrategy> device_list_strategy = {ListStrategy::kCdiCri};
  std::string annotation_plugin = "tessera";  // cdi.k8s.io/<plugin>_<id>
  AllocationPolicy allocation_policy = AllocationPolicy::kDistributed;
  MigStrategy mig_strategy = MigStrategy::kNone;
  std::vector<NamingRule> resources;
  SharingConfig sharing;
  TopologyConfig topology;
  HealthConfig health;
  int grpc_threads = 2;  // per resource server; bounds RSS (each thread has its own stack)
  // Windows nodes: advertise DirectX adapters from a host snapshot (docs/windows-snapshot.md)
  // instead of reading the PCI inventory; each adapter advertised `windows_replicas` times.
  std::string windows_snapshot;
  int windows_replicas = 1;
  // "process": DirectX adapters shared with process-isolated containers (directx.microsoft.com/*).
  // "hyperv": dismounted GPUs, each whole to one Hyper-V-isolated container
  // (tessera.dev/hyperv-gpu, vpci-instance-id:// device specs; no replicas).
  std::string windows_isolation = "process";
};

// The configured partition table (a preset name or a file), with `modules` merged into its
// module -> PCI address map; nullopt when none is configured. Reads the file.
Result<std::optional<topology::PartitionTable>> LoadPartitionTable(const TopologyConfig& config);

// Strict YAML parse (unknown fields rejected; errors name the field).
Result<Config> ParseConfig(std::string_view yaml);
// Environment overrides (TESSERA_DP_*, see docs); `env` is the process environment as a map.
Status ApplyEnvironment(const std::map<std::string, std::string>& env, Config* config);
// Semantic checks: resource names, replicas, strategies.
Status ValidateConfig(const Config& config);
// Socket file name of a resource's server in the socket dir ("tessera-nvidia-com-gpu.sock").
std::string ResourceSocketName(std::string_view resource);
// Checks a Kubernetes extended resource name: "<domain>/<name>", name <= 63 characters.
std::string CheckResourceName(std::string_view name);

// ---------------------------------------------------------------------------------------------
// Node-local lease file, written atomically by `tessera serve` / the control plane:
// {"version":1,"gpus":{"0000:18:00.0":{"state":"quarantined","reason":"...","tenancy":"..."}}}

enum class LeaseState { kFree, kReserved, kActive, kReleasing, kChecking, kQuarantined, kDraining };
const char* LeaseStateName(LeaseState state);

struct Lease {
  LeaseState state = LeaseState::kFree;
  std::string reason;
  std::string tenancy;
  // UID of the ResourceClaim the control plane pinned this GPU to (DRA); empty when none.
  std::string claim;
  // checking, quarantined and draining GPUs must not be handed out by kubelet.
  bool blocks_allocation() const {
    return state == LeaseState::kChecking || state == LeaseState::kQuarantined ||
           state == LeaseState::kDraining;
  }
  friend bool operator==(const Lease&, const Lease&) = default;
};

using LeaseMap = std::map<std::string, Lease>;  // by canonical PCI address

Result<LeaseMap> ParseLeaseFile(std::string_view json);
// A missing file means no leases.
Result<LeaseMap> ReadLeaseFile(const std::string& path);

// ---------------------------------------------------------------------------------------------
// Resources.

// An MPS-shared GPU's daemon config as the agent set it up: the GPU's memory and threads over its
// replicas, and the hash its ready marker must hold before any Allocate answers for it.
struct MpsLimits {
  uint64_t pinned_memory_bytes = 0;
  int active_thread_percentage = 100;
  std::string config_hash;  // mps::ConfigHash of the daemon's config
  friend bool operator==(const MpsLimits&, const MpsLimits&) = default;
};

struct PhysicalDevice {
  std::string id;  // GPU UUID when the driver reports one, else the PCI address
  std::string pci_address;
  std::optional<std::string> uuid;
  int numa_node = -1;
  std::string model;
  uint16_t vendor_id = 0;
  std::string driver;
  // CDI: the fully qualified name ("nvidia.com/gpu=GPU-...") of the device in the specs the CDI
  // builder writes, and its edits plus the spec's shared edits (for device-specs mode).
  std::string cdi_name;
  std::string cdi_kind;
  cdi::ContainerEdits edits;
  // What must exist for the device to be healthy: its sysfs entry and device nodes (host paths).
  std::vector<std::string> watch_paths;
  // A MIG device of the GPU at pci_address (whose presence, GPU faults and lease it shares).
  bool mig = false;
  // MIG devices: the GPU instance (a fault contained to it touches this device alone) and the
  // whole GPU's UUID (what a reset names).
  uint32_t gpu_instance_id = health::kWholeGpu;
  std::string parent_uuid;
  // Shared through MPS (sharing.mps) with this many replicas; 0 when not.
  int mps_replicas = 0;
};

struct Resource {
  std::string name;          // e.g. nvidia.com/gpu
  std::vector<int> devices;  // indices into ResourceManager::devices()
  int replicas = 1;          // > 1: shared, IDs "<id>::<n>"
  bool mps = false;          // shared through MPS (else time-sliced)
  bool fail_requests_greater_than_one = false;
  std::vector<std::string> ids;                           // advertised IDs in order
  std::map<std::string, int> device_of_id;                // advertised ID -> physical device index
  std::map<std::string, cdi::ContainerEdits> spec_edits;  // by CDI kind: the spec-level edits
  std::optional<topology::GpuChooser> chooser;            // GPU resources without replicas
  std::string chooser_note;  // why partition mode is off, when a table was configured
  std::string socket_name;   // endpoint in the socket dir
};

struct AdvertisedDevice {
  std::string id;
  bool healthy = true;
  int numa_node = -1;
};

struct DeviceSpecOut {
  std::string container_path;
  std::string host_path;
  std::string permissions;
};
struct MountOut {
  std::string container_path;
  std::string host_path;
  bool read_only = false;
};
struct ContainerAllocation {
  std::map<std::string, std::string> envs;
  std::vector<MountOut> mounts;
  std::vector<DeviceSpecOut> devices;
  std::map<std::string, std::string> annotations;
  std::vector<std::string> cdi_devices;
};

struct PreferredRequest {
  std::vector<std::string> available;
  std::vector<std::string> must_include;
  int size = 0;
};

// Why a device is unhealthy, for logs and Allocate errors.
struct DeviceHealth {
  bool present = true;
  std::string fault;           // a GPU fault took it out: the fault's reason, until recovered
  std::optional<Lease> lease;  // a blocking lease
  std::string mps_fault;       // MPS: why its daemon is not ready under the current config
  bool healthy() const { return present && fault.empty() && !lease && mps_fault.empty(); }
  std::string Describe() const;
};

class ResourceManager {
 public:
  // Pure: builds resources from the inventory (CDI names through cdi::BuildSpecs) and config.
  // `table`: the NVLink fabric partition table, when configured (LoadPartitionTable).
  static Result<std::unique_ptr<ResourceManager>> Create(
      const inventory::Inventory& inventory, const Config& config,
      const std::optional<topology::PartitionTable>& table = std::nullopt);
  // Windows nodes (WDDM display+compute -> directx.microsoft.com/display, MCDM compute-only ->
  // directx.microsoft.com/compute): devices are adapters by PCIe location path; Allocate gives
  // `vpci-location-path://` DeviceSpecs with empty container path and permissions (containerd
  // requires them empty) plus read-only mounts of the driver's CopyToVm* runtime files.
  static Result<std::unique_ptr<ResourceManager>> CreateForWindows(
      const windows::Snapshot& snapshot, const Config& config);

  const std::vector<Resource>& resources() const { return resources_; }
  const std::vector<PhysicalDevice>& devices() const { return devices_; }
  const Resource* FindResource(std::string_view name) const;
  const Config& config() const { return config_; }
  // The CDI specs that name the devices (written into cdi_dir by the agent).
  const std::vector<cdi::Spec>& cdi_specs() const { return cdi_specs_; }
  const std::vector<std::string>& warnings() const { return warnings_; }

  // Health inputs; each returns whether any advertised health changed (and then wakes waiters).
  bool SetPresence(const std::map<std::string, bool>& present_by_pci);
  // A GPU fault (faults.cc): the devices of the GPU at `pci_address` are unhealthy with `reason`
  // until ClearFault; with a GPU instance, only that instance's MIG devices (a GPU advertised
  // whole is its holder's, and is marked).
  bool SetFault(const std::string& pci_address, uint32_t gpu_instance_id,
                const std::string& reason);
  bool ClearFault(const std::string& pci_address);
  // The advertised IDs of those devices, by resource (what kubelet's PodResources reports).
  std::vector<std::pair<std::string, std::string>> AdvertisedIds(const std::string& pci_address,
                                                                 uint32_t gpu_instance_id) const;
  bool SetLeases(const LeaseMap& leases);
  // MPS devices (PhysicalDevice::mps_replicas > 0): the daemon config the agent set up for one,
  // the hash in its ready marker now ("" when none) and, when its daemon failed, why. Such a
  // device is healthy, and Allocate answers for it, only once the marker holds the config's
  // hash; until then Allocate waits (sharing.mps.readyTimeoutMs) and then refuses.
  bool SetMpsLimits(int device, const MpsLimits& limits);
  bool SetMpsState(int device, const std::string& marker_hash, const std::string& fault);
  DeviceHealth Health(int device) const;

  // ListAndWatch: the current list and its generation; WaitForChange blocks until the
  // generation differs from `seen`, `deadline` passes or Shutdown() is called.
  std::vector<AdvertisedDevice> List(const Resource& resource, uint64_t* generation) const;
  uint64_t WaitForChange(uint64_t seen, std::chrono::steady_clock::time_point deadline) const;
  void Shutdown();
  bool shut_down() const;

  // Allocate: one ContainerAllocation per container request. Unknown, unhealthy or leased IDs
  // and, with failRequestsGreaterThanOne, more than one replica are InvalidArgument naming the ID.
  Result<std::vector<ContainerAllocation>> Allocate(
      const Resource& resource, const std::vector<std::vector<std::string>>& requests) const;
  // GetPreferredAllocation: one ID list per request.
  Result<std::vector<std::string>> Preferred(const Resource& resource,
                                             const PreferredRequest& request) const;

 private:
  ResourceManager() = default;
  std::vector<std::string> PreferReplicas(const Resource& resource,
                                          const PreferredRequest& request) const;
  Result<ContainerAllocation> AllocateOne(const Resource& resource,
                                          const std::vector<std::string>& ids) const;
  Result<ContainerAllocation> AllocateWindows(const std::vector<std::string>& ids) const;
  bool HealthyLocked(int device) const;
  std::string MpsFaultLocked(int device) const;
  void BumpLocked();

  Config config_;
  std::vector<PhysicalDevice> devices_;
  std::vector<Resource> resources_;
  std::vector<cdi::Spec> cdi_specs_;
  std::vector<std::string> warnings_;
  struct WindowsNode;                           // windows_resources.cc
  std::shared_ptr<const WindowsNode> windows_;  // set on Windows nodes only

  mutable std::mutex mutex_;  // guards everything below
  mutable std::condition_variable changed_;
  std::vector<bool> present_;                         // per device
  std::vector<std::string> fault_;                    // per device: a GPU fault's reason
  std::vector<std::optional<Lease>> lease_;           // per device, blocking leases only
  std::vector<std::optional<MpsLimits>> mps_limits_;  // per device (MPS)
  std::vector<std::string> mps_marker_;               // per device: the ready marker's hash
  std::vector<std::string> mps_fault_;                // per device: why its daemon failed
  uint64_t generation_ = 1;
  bool shut_down_ = false;
};

// ---------------------------------------------------------------------------------------------
// Health probes (I/O).

// Which watched paths exist: PresenceKey -> all of the device's watch paths exist.
std::map<std::string, bool> ProbePresence(const std::vector<PhysicalDevice>& devices);
// The PCI address, or for a MIG device "<parent PCI>#<ID>": each MIG slice has its own presence
// (its capability nodes) on top of its parent's.
std::string PresenceKey(const PhysicalDevice& device);

}  // namespace tessera::deviceplugin

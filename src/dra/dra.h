// The DRA kubelet plugin's logic (driver `gpu.tessera.dev`), without gRPC or sockets: which
// devices this node publishes (ResourceSlice), reading a ResourceClaim, deciding whether a claim
// may be prepared here, the per-claim CDI spec, and the checkpoint of prepared claims.
//
// Facts relied on (resource.k8s.io/v1, kubelet DRA API): kubelet sends only a claim's
// namespace/name/UID, so prepare GETs the claim and refuses when it is unallocated or its UID
// differs; unprepare must work without the claim (it may be gone); kubelet retries both calls.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "cdi/cdi.h"
#include "common/error.h"
#include "deviceplugin/deviceplugin.h"
#include "inventory/inventory.h"
#include "mig/mig.h"
#include "topology/topology.h"

namespace tessera::dra {

inline constexpr const char* kDefaultDriverName = "gpu.tessera.dev";
// The kind of every per-claim spec: one transient spec per claim, as NVIDIA's DRA driver does.
inline constexpr const char* kClaimSpecKind = "gpu.tessera.dev/claim";
// Bounds on what kubelet and the API server may send us.
inline constexpr size_t kMaxClaimBytes = 1 << 20;  // one ResourceClaim object
inline constexpr size_t kMaxResults = 32;          // resource.k8s.io/v1 AllocationResultsMaxSize
inline constexpr size_t kMaxSliceDevices = 128;    // ResourceSlice spec.devices limit

// ---------------------------------------------------------------------------------------------
// This node's devices.

// Where a MIG placement device's instance goes: a GPU instance profile at a start, in memory
// slices of its board's profile table.
struct MigSlot {
  std::string profile;  // "1g.10gb"
  uint32_t profile_id = 0;
  uint32_t start = 0;
  uint32_t size = 0;
  uint32_t compute_slices = 0;
  friend bool operator==(const MigSlot&, const MigSlot&) = default;
};

// A partitionable GPU's shared counters (resource.k8s.io/v1 CounterSet): what its placement
// devices and the whole GPU take while allocated, so that the scheduler never allocates two that
// overlap.
struct CounterSet {
  std::string name;                          // "gpu-0000-18-00-0-counters"
  std::map<std::string, uint64_t> counters;  // "compute-slices", "memory-slice-3", ...
  friend bool operator==(const CounterSet&, const CounterSet&) = default;
};

// One GPU as this node publishes it in its ResourceSlice, with the CDI edits a claim gets.
struct NodeDevice {
  std::string name;  // DNS label, stable across restarts: "gpu-0000-18-00-0"
  std::string pci_address;
  std::string uuid;  // empty when the driver reported none
  std::string product_name;
  std::string type;  // "gpu" (shared kernel driver) or "vfio" (whole IOMMU group to a VM)
  int numa_node = -1;
  std::string driver_version;  // empty unless bound to nvidia and the version is known
  std::optional<int> nvlink_module;
  std::vector<uint32_t> partition_ids;  // fabric partitions containing this GPU's module
  std::optional<uint64_t> memory_bytes;
  // MIG devices (type "mig"): the slice's profile, its parent GPU's UUID, its SM count and the
  // memory slices it covers (capacity memorySlice<i>); name "gpu-<pci>-mig-<gi>-<ci>".
  std::string profile;
  std::string parent_uuid;
  std::optional<uint32_t> multiprocessors;
  std::vector<uint32_t> memory_slices;
  std::optional<uint32_t> gpu_instance_id;  // MIG devices: the GPU instance they are
  // MIG by demand (partitionable devices, KEP-4815): the instance prepare makes for a placement
  // device ("gpu-<pci>-mig-<profile>-<start>", type "mig"); nullopt for every other device.
  std::optional<MigSlot> mig_slot;
  // The counters the device takes from its GPU's counter set while allocated (placement devices
  // and the whole GPU of a partitionable GPU); empty: it consumes none.
  std::string counter_set;
  std::map<std::string, uint64_t> consumes;
  std::optional<uint32_t> gpu_minor;  // its /dev/nvidia<minor> (a MIG device's: its parent's)
  cdi::ContainerEdits edits;          // the device's own edits (device nodes)
  cdi::ContainerEdits shared_edits;   // spec-level edits of its mode (nvidiactl, libraries, ...)
};

struct NodeOptions {
  cdi::Mode mode = cdi::Mode::kAuto;  // auto: nvidia -> gpu, vfio-pci -> vfio
  // A GPU with MIG on is published as its MIG devices (type "mig"), not whole.
  std::optional<topology::PartitionTable> partitions;
  // MIG by demand: a GPU with MIG on whose board has a table here is published partitionable
  // (partitionable.cc): a counter set, the whole GPU and every profile at every allowed start. Off:
  // such a GPU is published as its existing MIG devices (or whole when it has none).
  bool mig_by_demand = false;
  std::vector<mig::ProfileTable> mig_tables;
  // GPU instances this plugin made for prepared claims (by PCI address): not someone else's, so
  // their slices stay offered (their claims hold the counters).
  std::map<std::string, std::set<uint32_t>> owned_instances;
  // Bytes of memory of each GPU instance profile (by PCI address, then profile ID), from NVML:
  // the placement devices' `memory` capacity; absent: not published.
  std::map<std::string, std::map<uint32_t, uint64_t>> profile_memory;
};

// "0000:18:00.0" -> "gpu-0000-18-00-0" (a DNS label: lowercase alphanumerics and '-').
std::string DeviceNameFor(std::string_view pci_address);

// Bytes of memory on a board identified by its PCI IDs, when the ID fixes it; nullopt otherwise
// (the slice then omits the device's `memory` capacity).
std::optional<uint64_t> KnownBoardMemory(uint16_t vendor_id, uint16_t device_id);

// Pure: every NVIDIA GPU the CDI builder can serve in the chosen mode, in PCI order. GPUs it
// cannot serve (no device node, no IOMMU group) are left out with a warning.
struct NodeDevices {
  std::vector<NodeDevice> devices;
  std::vector<CounterSet> counter_sets;  // partitionable GPUs' (MIG by demand); usually none
  std::vector<std::string> warnings;
  const NodeDevice* Find(std::string_view name) const;
};
Result<NodeDevices> DescribeNode(const inventory::Inventory& inventory, const NodeOptions& options);

// ---------------------------------------------------------------------------------------------
// Availability: health, faults and leases.

// A GPU fault stays visible in the slice as a device taint (KEP-5055, resource.k8s.io/v1
// `devices[].taints[]`) from the fault until the GPU is back in service: NoExecute evicts the
// Pods whose claims hold the device, NoSchedule only keeps new claims off it.
inline constexpr const char* kFaultTaintKey = "gpu.tessera.dev/fault";
inline constexpr size_t kMaxTaintedSliceDevices = 64;  // the device limit of a slice with taints

enum class TaintEffect { kNoSchedule, kNoExecute };
const char* TaintEffectName(TaintEffect effect);  // "NoSchedule", "NoExecute"

struct DeviceFault {
  std::string value;  // the taint's value, a label value: "xid-79", "gpu-lost"
  TaintEffect effect = TaintEffect::kNoSchedule;
  int64_t since_unix_seconds = 0;  // the taint's timeAdded
  // MIG: only the MIG device of this GPU instance is tainted when the slice publishes the GPU as
  // MIG devices; nullopt (or a GPU published whole): every device of the GPU.
  std::optional<uint32_t> gpu_instance_id;
  std::string reason;  // why, for a refused prepare: "gpu-fault: Xid 79 (...) on 0000:9d:00.0"
  friend bool operator==(const DeviceFault&, const DeviceFault&) = default;
};

struct DeviceTaint {
  std::string key = kFaultTaintKey;
  std::string value;
  TaintEffect effect = TaintEffect::kNoSchedule;
  int64_t time_added_unix_seconds = 0;
  friend bool operator==(const DeviceTaint&, const DeviceTaint&) = default;
};

struct DeviceState {
  // GPUs whose device nodes vanished: a device that is gone is not published.
  std::set<std::string> unhealthy;            // PCI addresses
  std::map<std::string, DeviceFault> faults;  // by PCI address: published, tainted
  deviceplugin::LeaseMap leases;              // by PCI address
};

// The fault that taints `device` now, or null.
const DeviceFault* FaultOf(const NodeDevice& device, const DeviceState& state);

// Why a device may not be handed out now, or empty when it may (for `claim_uid`; an empty
// claim UID asks whether it may be published at all: a faulted device is published, tainted,
// but no claim is prepared on it).
std::string WhyUnavailable(const NodeDevice& device, const DeviceState& state,
                           std::string_view claim_uid = {});

// ---------------------------------------------------------------------------------------------
// Device health as kubelet's DRAResourceHealth stream (v1alpha1) reports it: hardware health only
// (a vanished device, or one whose GPU is faulted until it is back in service); leases are not
// health.

enum class HealthStatus { kUnknown = 0, kHealthy = 1, kUnhealthy = 2 };  // the wire enum's values

struct DeviceHealth {
  std::string device_name;
  HealthStatus health = HealthStatus::kUnknown;
  int64_t changed_unix_seconds = 0;  // when this device's health last changed
  friend bool operator==(const DeviceHealth&, const DeviceHealth&) = default;
};

struct HealthSnapshot {
  uint64_t version = 0;  // grows with every change of any device's health
  std::vector<DeviceHealth> devices;
};

// ---------------------------------------------------------------------------------------------
// ResourceSlice (resource.k8s.io/v1).

struct SliceOptions {
  std::string driver = kDefaultDriverName;
  std::string node_name;
  int64_t generation = 1;
};

// The slice's object name: "<node>-<driver>" with characters a DNS subdomain refuses replaced.
std::string SliceName(std::string_view driver, std::string_view node_name);

// Names of the devices that are published now (present and not blocked by a lease; faulted
// devices included): at most kMaxSliceDevices, or kMaxTaintedSliceDevices while one is tainted.
std::vector<std::string> PublishedDevices(const NodeDevices& node, const DeviceState& state);

// The taints of the published devices, by device name (devices without a fault are absent).
std::map<std::string, DeviceTaint> DeviceTaints(const NodeDevices& node, const DeviceState& state);

// The ResourceSlice object as JSON: one pool named after the node, resourceSliceCount 1, one
// device per published GPU, with its taints. `resource_version` is set on the object when not
// empty (update).
std::string BuildResourceSlice(const NodeDevices& node, const std::vector<std::string>& published,
                               const SliceOptions& options, std::string_view resource_version = {},
                               const std::map<std::string, DeviceTaint>& taints = {});

// A pool with counter sets (MIG by demand, KEP-4815): the counter sets in slices of their own (at
// most 8 sets each; from 1.35 a slice holds either devices or sharedCounters), then the devices in
// slices of at most 64 (the limit of a slice whose devices consume counters). Every slice names the
// pool's resourceSliceCount and generation.
inline constexpr size_t kMaxSliceCounterSets = 8;
inline constexpr size_t kMaxCounterSliceDevices = 64;

// The pool's slice names: SliceName for the first, "<SliceName>-<index>" for the others.
std::string PoolSliceName(std::string_view driver, std::string_view node_name, size_t index);
// How many slices the pool has: 1 without counter sets; fixed by the node's devices, not by which
// are published now.
size_t PoolSliceCount(const NodeDevices& node);
// The pool's slices as JSON, in order, without resourceVersion; without counter sets exactly
// BuildResourceSlice's one slice.
std::vector<std::string> BuildResourceSlices(const NodeDevices& node,
                                             const std::vector<std::string>& published,
                                             const SliceOptions& options,
                                             const std::map<std::string, DeviceTaint>& taints);

// ---------------------------------------------------------------------------------------------
// ResourceClaim (resource.k8s.io/v1), read strictly for what prepare needs.

struct AllocationResult {
  std::string request;
  std::string driver;
  std::string pool;
  std::string device;
  friend bool operator==(const AllocationResult&, const AllocationResult&) = default;
};

struct ResourceClaim {
  std::string namespace_name;
  std::string name;
  std::string uid;
  bool allocated = false;  // status.allocation present
  std::vector<AllocationResult> results;
};

// Parses the API server's JSON (bounded size and nesting, bounded lists). Errors name the
// field and never echo a whole value.
Result<ResourceClaim> ParseResourceClaim(std::string_view json);

// ---------------------------------------------------------------------------------------------
// Prepare.

struct ClaimRef {
  std::string namespace_name;
  std::string name;
  std::string uid;
  friend bool operator==(const ClaimRef&, const ClaimRef&) = default;
};

// A MIG instance prepare made for a placement device (MIG by demand): unprepare destroys it.
struct MigInstance {
  std::string pci_address;  // its GPU
  uint32_t gpu_instance_id = 0;
  uint32_t compute_instance_id = 0;
  std::string uuid;                           // "MIG-…"
  std::vector<cdi::DeviceNode> device_nodes;  // its GI and CI capability nodes
  friend bool operator==(const MigInstance&, const MigInstance&) = default;
};

// The instance a prepare is about to make, in the claim's file before NVML makes it: a plugin
// killed between the two finds it again by its place (one GPU instance per start at most).
struct MigIntent {
  std::string pci_address;  // its GPU
  uint32_t profile_id = 0;
  uint32_t start = 0;
  uint32_t size = 0;
  // The GPU instance found there on start (adopted for the claim); empty until then.
  std::optional<uint32_t> gpu_instance_id;
  friend bool operator==(const MigIntent&, const MigIntent&) = default;
};

// One device as kubelet's NodePrepareResources answer carries it.
struct PreparedDevice {
  std::vector<std::string> request_names;
  std::string pool_name;
  std::string device_name;
  std::vector<std::string> cdi_device_ids;
  std::optional<MigInstance> mig_instance;  // not in kubelet's answer: the checkpoint's
  std::optional<MigIntent> mig_intent;      // the placement's instance, written before it is made
  friend bool operator==(const PreparedDevice&, const PreparedDevice&) = default;
};

struct PreparedClaim {
  ClaimRef ref;
  std::vector<PreparedDevice> devices;
  // Only intents so far ("pending": true in its file): instances may exist at their places, the
  // claim is not prepared.
  bool pending = false;
  friend bool operator==(const PreparedClaim&, const PreparedClaim&) = default;
};

struct PrepareContext {
  std::string driver = kDefaultDriverName;
  std::string pool;  // this node's pool = node name
  const NodeDevices* node = nullptr;
  const DeviceState* state = nullptr;
};

// Pure decision: refuses (FailedPrecondition / NotFound) when the claim is not allocated, its
// UID differs from kubelet's, or one of our results names a device this node does not publish or
// that is unavailable; otherwise the devices of our driver and pool with their CDI IDs.
Result<PreparedClaim> PlanPrepare(const ClaimRef& ref, const ResourceClaim& claim,
                                  const PrepareContext& context);

// The per-claim CDI spec: kind gpu.tessera.dev/claim, a device "<uid>-<device>" per prepared
// device with that GPU's edits, the mode's shared edits once at spec level.
Result<cdi::Spec> BuildClaimSpec(const PreparedClaim& claim, const NodeDevices& node);
// "<cdi-dir>/gpu.tessera.dev-claim_<uid>.json"
std::string ClaimSpecPath(std::string_view cdi_dir, std::string_view uid);
// "gpu.tessera.dev/claim=<uid>-<device>"
std::string ClaimCdiId(std::string_view uid, std::string_view device);

// ---------------------------------------------------------------------------------------------
// Checkpoint of prepared claims, so that a restarted plugin still answers a retried prepare the
// same without the claim object. One file per claim, "<plugin-dir>/prepared/claim_<uid>.json",
// in the checkpoint format with that one claim; earlier versions kept every claim in
// "<plugin-dir>/checkpoint.json", which Driver::Load moves into the per-claim files.

using Checkpoint = std::map<std::string, PreparedClaim>;  // by claim UID

std::string SerializeCheckpoint(const Checkpoint& checkpoint);
// Strict: unknown fields, wrong types and oversized input are errors.
Result<Checkpoint> ParseCheckpoint(std::string_view json);
// A missing file is an empty checkpoint.
Result<Checkpoint> ReadCheckpoint(const std::string& path);
Status WriteCheckpoint(const std::string& path, const Checkpoint& checkpoint,
                       Durability durability = Durability::kPowerLoss);

// Whether a claim UID may name files: 1..253 bytes of [A-Za-z0-9._-], not starting with a dot
// (Kubernetes UIDs are UUIDs).
bool IsFileNameSafeUid(std::string_view uid);
// "<dir>/claim_<uid>.json"
std::string PreparedClaimPath(std::string_view dir, std::string_view uid);
// Every claim file in `dir` (a missing dir holds none). A file that does not parse, or names
// another claim than its file name, is removed and reported in `*dropped`: only a prepare cut
// short by a power loss leaves one, and a lost prepare is harmless (see Driver::Prepare).
// Temporary files left by a crash are removed.
Result<Checkpoint> ReadPreparedClaims(const std::string& dir, std::vector<std::string>* dropped);
// Writes the claim's file (tmp + rename) with `durability`.
Status WritePreparedClaim(const std::string& dir, const PreparedClaim& claim,
                          Durability durability);

// ---------------------------------------------------------------------------------------------
// The driver's state on this node: prepared claims (checkpointed), device health and leases.
// The gRPC server calls it; tests drive it without a socket.

struct DriverConfig {
  std::string driver = kDefaultDriverName;
  std::string node_name;
  std::string cdi_dir = cdi::kDefaultSpecDir;
  std::string plugin_dir;  // holds prepared/, the checkpoint
};

// GETs resource.k8s.io/v1 ResourceClaim <namespace>/<name> and returns its JSON text.
using ClaimFetcher =
    std::function<Result<std::string>(const std::string& ns, const std::string& name)>;

// NVLink fabric partitions around prepared claims (shared NVSwitch mode), as NVIDIA's DRA driver
// does: prepare activates the partition whose GPUs are exactly the claim's before the claim is
// handed out; unprepare deactivates it. The plugin wires these to the node's activator.
struct FabricHooks {
  // For `holder` (the claim UID); an error refuses the claim with nothing activated.
  std::function<Status(const std::string& holder, const std::vector<std::string>& pci_addresses)>
      activate;
  std::function<Status(const std::string& holder)> deactivate;
};

// MIG by demand: the NVML side of a placement device's instance. The plugin wires these to NVML
// (mig_instances.cc); tests of the driver alone give their own.
struct MigHooks {
  // Makes the instance of `device`'s slot (a GPU instance with one compute instance spanning it)
  // and its capability device nodes. An instance of that profile at exactly that place that no
  // prepared claim names (`owned`: the GPU instance IDs prepared claims hold on that GPU) is one an
  // interrupted prepare made: it is taken, not made twice.
  std::function<Result<MigInstance>(const NodeDevice& device, const std::set<uint32_t>& owned)>
      create;
  // Destroys the instance; an instance already gone is Ok. One with processes answers
  // FailedPrecondition (NVML_ERROR_IN_USE) and stays.
  std::function<Status(const MigInstance& instance)> destroy;
  // The GPU instance of the intent's profile at exactly its place that is not in `owned`, if any.
  std::function<Result<std::optional<uint32_t>>(const MigIntent& intent,
                                                const std::set<uint32_t>& owned)>
      find;
};

// On start, before the driver loads: each pending claim of `claims` (read from `dir`) whose
// intents find an instance at their place keeps them as its own (the GPU instance ID written in
// its file); one with none is dropped (its file removed). Returns what it did, for the log.
std::vector<std::string> AdoptIntents(const MigHooks& hooks, const std::string& dir,
                                      Checkpoint& claims);
// Destroys the instance at the intent's place (not one of `owned`), if one is there.
Status ReleaseIntent(const MigHooks& hooks, const MigIntent& intent,
                     const std::set<uint32_t>& owned);

class Driver {
 public:
  Driver(DriverConfig config, NodeDevices node, ClaimFetcher fetch);
  // Before serving kubelet: every prepare and unprepare goes through `hooks` from then on.
  void SetFabric(FabricHooks hooks);
  // Before serving kubelet: placement devices' instances are made and destroyed through `hooks`;
  // without them a claim for a placement device is refused.
  void SetMig(MigHooks hooks);
  // The GPU instances prepared claims hold (and pending claims' adopted intents), by PCI address
  // (what a restarted plugin must not take for someone else's).
  static std::map<std::string, std::set<uint32_t>> OwnedInstances(const Checkpoint& checkpoint);
  // UIDs of the claims prepared now (what holds a fabric partition).
  std::vector<std::string> PreparedClaimUids() const;
  // UIDs of the prepared claims holding any device of the GPU at `pci_address`.
  std::vector<std::string> ClaimsHolding(const std::string& pci_address) const;
  // Reads the prepared claims of an earlier run (moving a checkpoint.json of an earlier version
  // into per-claim files); returns a warning for each claim file it had to drop.
  Result<std::vector<std::string>> Load();

  // Idempotent: a claim prepared before (this run or an earlier one) answers the same without
  // asking the API server again. Writes the claim's CDI spec, then its checkpoint file.
  Result<PreparedClaim> Prepare(const ClaimRef& ref);
  // Removes the claim's CDI spec and checkpoint file; an unknown claim succeeds.
  Status Unprepare(const ClaimRef& ref);

  // Replaces health, fault and lease state; returns whether the published devices or their taints
  // changed.
  bool SetState(DeviceState state);
  std::vector<std::string> Published() const;
  // The published devices' taints, by device name.
  std::map<std::string, DeviceTaint> Taints() const;
  // Every device's health, from the state SetState was given.
  HealthSnapshot Health() const;
  // Returns when the health version differs from `seen` or after `timeout`.
  void WaitForHealthChange(uint64_t seen, std::chrono::milliseconds timeout) const;
  const NodeDevices& node() const { return node_; }
  const DriverConfig& config() const { return config_; }
  // "<plugin-dir>/prepared": the claim files.
  std::string PreparedDir() const;

 private:
  // The claim's CDI spec from its prepared devices; with `only_if_missing`, only when the file
  // is gone (a retry after a reboot, when the CDI dir is tmpfs).
  Status WriteClaimSpec(const PreparedClaim& prepared, bool only_if_missing) const;
  // The PCI addresses of a prepared claim's devices.
  std::vector<std::string> PciAddressesOf(const PreparedClaim& claim) const;
  const DriverConfig config_;
  const NodeDevices node_;
  ClaimFetcher fetch_;
  FabricHooks fabric_;  // set before any call; empty: no fabric manager
  MigHooks mig_;        // set before any call; empty: no MIG by demand
  // MIG by demand at prepare: refuses a MIG device on a GPU a claim holds whole and the whole GPU
  // while instances of it are prepared; makes the placement devices' instances (undone on error).
  Status CheckPartitioning(const PreparedClaim& prepared) const;
  Status MakeInstances(PreparedClaim& prepared);
  // Writes the claim's intents (pending) before any instance is made; releases those of an
  // earlier pending try at other places.
  Status WriteIntents(PreparedClaim& prepared);
  // The instances held by others than claim `uid`.
  std::map<std::string, std::set<uint32_t>> OwnedByOthers(const std::string& uid) const;
  // Undoes MakeInstances; the pending file goes when nothing made stays.
  void UndoInstances(const PreparedClaim& prepared);
  Status DestroyClaimInstances(const ClaimRef& ref);
  Status ReleasePending(const ClaimRef& ref);
  mutable std::mutex mu_;  // guards checkpoint_, pending_, state_, the health fields and the files
  Checkpoint checkpoint_;
  Checkpoint pending_;  // claims with intents only
  DeviceState state_;
  std::map<std::string, int64_t> health_changed_;  // by device name, unix seconds
  uint64_t health_version_ = 1;
  mutable std::condition_variable health_changed_cv_;
};

}  // namespace tessera::dra

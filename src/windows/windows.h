// Windows containers with GPUs: device strings, HCS Device documents gated by the host's schema
// version, runtime-DLL mounts from CopyToVm* registry values, ctr/nerdctl/docker flags, image and
// isolation compatibility, and the pure parts of a WDDM/MCDM device plugin.
//
// Everything here is pure logic over a Snapshot (windows/snapshot.h): nothing assumes it runs on
// Windows. The native discovery backend that writes snapshots is src/inventory/windows.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "windows/snapshot.h"

namespace tessera::windows {

// GUID_DISPLAY_DEVICE_ARRIVAL: the interface class of every display adapter.
inline constexpr const char* kDisplayAdapterClassGuid = "5B45201D-F2F2-4F3B-85BB-30FF1F953599";

// ---------------------------------------------------------------------------------------------
// Device strings (docker --device, ctr --device, OCI windows.devices)

enum class DeviceIdType {
  kClass,             // "class/GUID" (docker) or "class://GUID"
  kVpciClassGuid,     // "vpci-class-guid://GUID"
  kVpciLocationPath,  // "vpci-location-path://PCIROOT(0)#PCI(1E00)"
  kVpciInstanceId,    // "vpci-instance-id://PCIP\VEN_...": Hyper-V (utility VM) assignment
  kVpci,              // "vpci://ID": legacy spelling of vpci-instance-id
  kGpu,               // "gpu://ID": GPU assignment to a utility VM
};
const char* DeviceIdTypeName(
    DeviceIdType type);  // the OCI idType: "class", "vpci-location-path"...

// An OCI windows.devices entry: {"id": ..., "idType": ...}.
struct DeviceRef {
  DeviceIdType type = DeviceIdType::kClass;
  std::string id;  // GUIDs are uppercased and lose their braces; other IDs are kept as given

  bool IsHyperVOnly() const;
  friend bool operator==(const DeviceRef&, const DeviceRef&) = default;
};

// Parses every syntax above. Errors name the problem: an unknown type, an empty ID, a malformed
// GUID, a location path that is not NAME(ARGS)#NAME(ARGS)..., an instance ID with bad characters.
Result<DeviceRef> ParseDeviceString(const std::string& text);
// The containerd/ctr spelling, "idType://id".
std::string FormatDeviceString(const DeviceRef& ref);

// ---------------------------------------------------------------------------------------------
// HCS schema versions and Device documents

enum class Isolation { kProcess, kHyperV };
Result<Isolation> ParseIsolation(const std::string& text);  // "process" | "hyperv"
const char* IsolationName(Isolation isolation);

// The highest HCS schema version a build supports, from the known table (17763→2.1, 18362→2.2,
// 19041→2.3, 20348→2.5, 22000→2.6, 22621→2.7; a build between two rows gets the lower row).
// NotFound below 17763, where HCS has only schema 1.0 and process-isolated GPUs do not exist.
Result<SchemaVersion> HcsSchemaForBuild(uint32_t build);
// The schema versions a build supports, 2.1 up to HcsSchemaForBuild, for snapshots whose
// discovery could not ask the compute service.
std::vector<SchemaVersion> HcsSchemaVersionsForBuild(uint32_t build);

// The HCS schema Device JSON (compact) for one device, or the precise refusal:
// class GUIDs → {"InterfaceClassGuid": GUID} (schema 2.1);
// location paths → {"Type":"DeviceInstance","LocationPath": PATH} (schema 2.2: WS2019's 2.1
// rejects it); Hyper-V-only types (vpci-instance-id, vpci, gpu) on process isolation → error.
// With Hyper-V isolation the device is assigned to the utility VM as a VirtualPciDevice
// (needs schema 2.3, build 19041).
Result<std::string> HcsDeviceJson(const DeviceRef& device, SchemaVersion host_schema,
                                  Isolation isolation);

// ---------------------------------------------------------------------------------------------
// Runtime files (CopyToVm* → read-only bind mounts)

// Extra files per PCI vendor that no CopyToVm* value lists, mounted into System32 from the
// adapter's DriverStore folder. Default: NVIDIA 10de → nvidia-smi.exe.
using VendorFiles = std::map<uint16_t, std::vector<std::string>>;
VendorFiles DefaultVendorFiles();
// "10de=nvidia-smi.exe" (one entry; repeat the flag for more files).
Result<std::pair<uint16_t, std::string>> ParseVendorFile(const std::string& text);

struct FileMount {
  std::string source;       // host path: <DriverStore>\<source>
  std::string destination;  // container path: C:\Windows\System32\<file> or SysWOW64
  std::string origin;       // what asked for it: "CopyToVmOverwrite\nvapi64.dll", "vendor 10de"
  bool read_only = true;
  friend bool operator==(const FileMount&, const FileMount&) = default;
};

struct RuntimeFiles {
  std::vector<FileMount> mounts;
  std::vector<std::string> problems;  // rejected values and dropped conflicts, one line each
};

// Conflict policy for one destination named twice (documented in docs/windows-containers.md):
// the same source again is dropped silently; otherwise a CopyToVmOverwrite* value beats a
// CopyToVmWhenNewer* value, and between equals the first in snapshot order wins (top-level
// subkeys come before component subkeys). The loser is reported in `problems`.
RuntimeFiles PlanRuntimeFiles(const Adapter& adapter, const VendorFiles& vendor_files);
// Several adapters: per-adapter plans merged in order; a destination already mounted from a
// different source by an earlier adapter keeps the earlier one and reports the later.
RuntimeFiles PlanRuntimeFiles(const std::vector<const Adapter*>& adapters,
                              const VendorFiles& vendor_files);

// ---------------------------------------------------------------------------------------------
// gen-device-mounts

enum class MountFormat { kCtr, kNerdctl, kDocker, kJson };
Result<MountFormat> ParseMountFormat(const std::string& text);

struct AdapterSelection {
  bool all = false;
  std::vector<int> indexes;                 // --index
  std::vector<uint64_t> luids;              // --luid
  std::vector<std::string> location_paths;  // --path
};

struct MountsOptions {
  AdapterSelection selection;
  MountFormat format = MountFormat::kCtr;
  VendorFiles vendor_files = DefaultVendorFiles();
};

struct MountsPlan {
  std::vector<const Adapter*> adapters;  // selected, in snapshot order
  std::vector<DeviceRef> devices;        // what --device gets
  RuntimeFiles files;                    // empty for docker (HCS v1 cannot bind single files)
  std::vector<std::string> arguments;    // runtime flags, one argv element each
  std::vector<std::string> diagnostics;  // warnings for stderr
};

// Chooses adapters and builds the flags for `format`. Errors: an unknown index/LUID/path, an
// empty selection, a selected adapter without a PCI location path.
Result<MountsPlan> PlanMounts(const Snapshot& snapshot, const MountsOptions& options);
// The plan as JSON (format kJson); includes the diagnostics.
std::string MountsPlanJson(const Snapshot& snapshot, const MountsPlan& plan);
// argv for `--run`: "ctr run --rm FLAGS IMAGE ID CMD...", "nerdctl run --rm FLAGS IMAGE CMD...",
// "docker run --rm FLAGS IMAGE CMD...". InvalidArgument for kJson.
Result<std::vector<std::string>> RunCommand(MountFormat format, const MountsPlan& plan,
                                            const std::string& image,
                                            const std::vector<std::string>& command,
                                            const std::string& container_id);

// Windows shows every GPU to a container given one on these builds (known Windows bug on
// WS2022; no fixed update is known, so every UBR of 20348 counts).
bool ShowsEveryGpuToContainers(uint32_t build, uint32_t ubr);

// ---------------------------------------------------------------------------------------------
// Image and isolation compatibility

struct ImageInfo {
  uint32_t build = 0;
  std::string base;  // "windows", "server", "servercore", "nanoserver" or "" (unknown)
};
// Tag → build: ltsc2016/1607 14393, 1709 16299, 1803 17134, ltsc2019/1809 17763, 1903 18362,
// 1909 18363, 2004 19041, 20H2 19042, ltsc2022 20348, ltsc2025 26100, and 10.0.BUILD[.UBR].
// Tags like "4.8-windowsservercore-ltsc2022" are searched token by token.
Result<ImageInfo> ParseImageReference(const std::string& reference);
std::optional<uint32_t> BuildForTag(const std::string& tag);

struct HyperVGpuPreflight;  // windows/hyperv.h

struct CompatibilityRequest {
  uint32_t host_build = 0;
  ImageInfo image;
  Isolation isolation = Isolation::kProcess;
  bool gpu = false;
  // GPU with Hyper-V isolation: the preflight of the host's snapshot (CheckHyperVGpu). Without
  // one the answer is a refusal that says what the chain needs; with one, the verdict is the
  // preflight's: it runs only when every check passes.
  const HyperVGpuPreflight* hyperv_gpu_preflight = nullptr;
};
struct CompatibilityVerdict {
  bool ok = false;
  std::string summary;               // one line: why it runs, or why not
  std::vector<std::string> details;  // requirements, explanations, preflight lines
  std::vector<std::string> warnings;
};
CompatibilityVerdict CheckCompatibility(const CompatibilityRequest& request);

// ---------------------------------------------------------------------------------------------
// Inventory

// The Linux inventory JSON shape (devices, iommu_groups, nvidia_driver...) for a Windows host,
// plus a "windows" object with adapter details. pci_address is the adapter's PCI location path
// (Windows exposes no PCI domain:bus:device.function through DXCore), null when it has none.
std::string InventoryJson(const Snapshot& snapshot, int indent = 2);

// ---------------------------------------------------------------------------------------------
// WDDM/MCDM device plugin pieces (the kubelet gRPC server lives in the device plugin)

inline constexpr const char* kDisplayResource = "directx.microsoft.com/display";
inline constexpr const char* kComputeResource = "directx.microsoft.com/compute";

struct PluginDevice {
  std::string id;         // location path; with replicas "<location path>::<n>"
  int adapter_index = 0;  // into Snapshot::adapters
  std::string location_path;
};
struct PluginResource {
  std::string name;  // kDisplayResource or kComputeResource
  std::vector<PluginDevice> devices;
};
struct PluginInventory {
  std::vector<PluginResource> resources;  // only non-empty resources, display first
  std::vector<std::string> skipped;       // adapters not advertised and why
};
// Display+compute adapters → directx.microsoft.com/display, compute-only (MCDM) →
// directx.microsoft.com/compute. replicas ≥ 1 advertises each adapter that many times.
Result<PluginInventory> BuildPluginInventory(const Snapshot& snapshot, int replicas);

// Hyper-V isolation (tessera-device-plugin --windows-isolation hyperv): every dismounted PCI
// display or compute adapter (PCIP\...), advertised once: a GPU goes whole to one utility VM.
// Device IDs are location paths; adapter_index points into the snapshot's pci_adapters.
// FailedPrecondition for a format-1 snapshot.
inline constexpr const char* kHyperVGpuResource = "tessera.dev/hyperv-gpu";
Result<PluginInventory> BuildHyperVPluginInventory(const Snapshot& snapshot);

// Kubelet's v1beta1 DeviceSpec and Mount, as plain values.
struct PluginDeviceSpec {
  std::string host_path;       // "vpci-location-path://PCIROOT(0)#PCI(1E00)"
  std::string container_path;  // "" (containerd requires the empty field for Windows devices)
  std::string permissions;     // ""
  friend bool operator==(const PluginDeviceSpec&, const PluginDeviceSpec&) = default;
};
struct PluginMount {
  std::string container_path;
  std::string host_path;
  bool read_only = true;
  friend bool operator==(const PluginMount&, const PluginMount&) = default;
};
struct PluginAllocation {
  std::vector<PluginDeviceSpec> devices;
  std::vector<PluginMount> mounts;
  std::vector<std::string> problems;  // rejected CopyToVm* values, for the plugin's log
};
// The Allocate response for one container request. Replicas of one adapter give one DeviceSpec.
// NotFound for an ID the inventory does not advertise.
Result<PluginAllocation> Allocate(const Snapshot& snapshot, const PluginInventory& inventory,
                                  const std::vector<std::string>& device_ids,
                                  const VendorFiles& vendor_files);
// Hyper-V isolation: DeviceSpec{host_path: "vpci-instance-id://PCIP\...", "", ""} and no mounts
// (the driver reaches the utility VM through the pod's kerneldrivers annotation). One device per
// container: the pod's MMIO gaps are sized for one GPU, so more is InvalidArgument.
Result<PluginAllocation> AllocateHyperV(const Snapshot& snapshot, const PluginInventory& inventory,
                                        const std::vector<std::string>& device_ids);

}  // namespace tessera::windows

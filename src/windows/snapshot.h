// The Windows host snapshot: what a Windows host's DirectX adapters look like, as plain values,
// and (format 2) the facts Hyper-V isolation with an assigned GPU depends on.
//
// Format documented in docs/windows-snapshot.md. The native discovery backend
// (src/inventory/windows, cross-compiled with mingw-w64) writes it; everything in
// tessera_windows reads it. This header and snapshot_json.cc compile on both sides, so there is
// one serializer: keep them free of POSIX and Win32 calls.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"

namespace tessera::windows {

// Format 1: DirectX adapters. Format 2 adds the PCI display/compute adapters with their Discrete
// Device Assignment facts, and the host's Hyper-V and containerd facts. Both are read; a snapshot
// is written in format 2 exactly when it holds those facts.
inline constexpr int kSnapshotVersion = 2;

// Registry value types as regedit names them. CopyToVm* values are REG_SZ or REG_MULTI_SZ; the
// discovery backend records any other type it meets so the consumer can report it.
enum class RegistryType { kSz, kMultiSz, kExpandSz, kDword, kQword, kBinary, kNone };
const char* RegistryTypeName(RegistryType type);  // "REG_SZ", "REG_MULTI_SZ", ...
std::optional<RegistryType> ParseRegistryType(const std::string& name);

// The four subkeys of an adapter's driver (software) key whose values name runtime files that the
// container platform copies into a guest: the first two into System32, the Wow64 twins into
// SysWOW64. A component subkey may hold them too: "<component>\CopyToVmOverwrite".
inline constexpr const char* kCopyToVmSubkeys[] = {
    "CopyToVmOverwrite", "CopyToVmWhenNewer", "CopyToVmOverwriteWow64", "CopyToVmWhenNewerWow64"};

// One raw value under a CopyToVm* subkey, exactly as the registry holds it.
struct CopyToVmValue {
  std::string
      subkey;  // relative to the driver key: "CopyToVmOverwrite" or "nvcomp\CopyToVmOverwrite"
  std::string name;  // the value's name (may be empty: the key's default value)
  RegistryType type = RegistryType::kMultiSz;
  std::vector<std::string> strings;  // REG_SZ/REG_EXPAND_SZ: one string; REG_MULTI_SZ: the list;
                                     // other types: empty

  friend bool operator==(const CopyToVmValue&, const CopyToVmValue&) = default;
};

// One DirectX adapter (DXCore hardware adapter) joined with its PnP device node.
struct Adapter {
  uint64_t luid = 0;        // adapter LUID as (HighPart << 32) | LowPart; changes every boot
  std::string instance_id;  // PnP device instance ID, e.g. PCI\VEN_10DE&DEV_1EB8&...\4&...
  std::string description;  // DXCore DriverDescription
  uint16_t vendor_id = 0;
  uint16_t device_id = 0;
  uint32_t subsystem_id = 0;  // as in SUBSYS_ssssvvvv: subsystem device << 16 | subsystem vendor
  uint8_t revision = 0;
  std::optional<uint32_t> class_code;  // 24-bit PCI class from the compatible IDs (PCI\CC_xxxxxx)
  std::string driver_service;  // DEVPKEY_Device_Service, e.g. "nvlddmkm"; empty when unknown
  std::string driver_version;  // DXCore DriverVersion as a.b.c.d; empty when unknown
  // DEVPKEY_Device_Driver: "{4d36e968-e325-11ce-bfc1-08002be10318}\0001", relative to
  // HKLM\SYSTEM\CurrentControlSet\Control\Class.
  std::string driver_key;
  std::string driver_store_path;            // D3DDDI_QUERYREGISTRY_DRIVERSTOREPATH, host path
  std::vector<std::string> location_paths;  // DEVPKEY_Device_LocationPaths, in Windows' order
  bool integrated = false;                  // DXCore IsIntegrated
  bool detachable = false;                  // DXCore IsDetachable
  bool display = false;                     // DXCORE_ADAPTER_ATTRIBUTE_D3D12_GRAPHICS
  bool compute = false;                     // DXCORE_ADAPTER_ATTRIBUTE_D3D12_CORE_COMPUTE
  std::vector<CopyToVmValue> copy_to_vm;

  // The first location path that starts at a PCI root ("PCIROOT(0)#PCI(1E00)"): the one HCS
  // takes in Device{Type: DeviceInstance, LocationPath}. Empty when there is none.
  std::string PciLocationPath() const;

  friend bool operator==(const Adapter&, const Adapter&) = default;
};

struct OsVersion {
  std::string product_name;  // e.g. "Windows Server 2022 Datacenter"
  uint32_t build = 0;        // CurrentBuildNumber, e.g. 20348
  uint32_t ubr = 0;          // update build revision, e.g. 2849

  friend bool operator==(const OsVersion&, const OsVersion&) = default;
};

// An HCS schema version, "2.1".
struct SchemaVersion {
  int major = 0;
  int minor = 0;
  friend auto operator<=>(const SchemaVersion&, const SchemaVersion&) = default;
};
std::string FormatSchemaVersion(SchemaVersion version);
Result<SchemaVersion> ParseSchemaVersion(const std::string& text);

// ---- Format 2: Hyper-V isolation facts ------------------------------------------------------

// One memory range the device was given, from its allocated configuration
// (CM_Get_First_Log_Conf(ALLOC_LOG_CONF), ResType_Mem and ResType_MemLarge). Both ends inclusive.
struct MemoryRange {
  uint64_t start = 0;
  uint64_t end = 0;
  uint64_t Size() const { return end - start + 1; }
  friend bool operator==(const MemoryRange&, const MemoryRange&) = default;
};

// The interrupts the device was given (ResType_IRQ). A message-signaled interrupt's number reads
// 42949... in decimal (as SurveyDDA.ps1 tells them apart); every other number is line-based.
struct InterruptCounts {
  uint32_t message_signaled = 0;
  uint32_t line_based = 0;
  friend bool operator==(const InterruptCounts&, const InterruptCounts&) = default;
};

// The PCI device properties Discrete Device Assignment depends on: property set
// {3AB22E31-8264-4b4e-9AF5-A8D2D8E33E62} (pciprop.h), as Microsoft's SurveyDDA.ps1 reads them.
// nullopt when the device node does not carry the property.
struct DdaProperties {
  // pid 1, DEVPKEY_PciDevice_DeviceType: 2 PCIe endpoint, 4 root-complex integrated endpoint
  // (both assignable); 0 conventional PCI, 1 PCI-X, 3 legacy endpoint, 5 treated as PCI (firmware
  // kept PCIe control), 6-14 bridges and ports (none assignable).
  std::optional<uint32_t> device_type;
  // pid 31, DEVPKEY_PciDevice_AcsCompatibleUpHierarchy: 0 not supported (traffic may be
  // redirected to other devices: not assignable), 1 single function, 2 no P2P, 3 supported.
  std::optional<uint32_t> acs_compatible_up_hierarchy;
  // pid 34, DEVPKEY_PciDevice_RequiresReservedMemoryRegion: the firmware keeps the device
  // attached to firmware-owned memory (an RMRR): not assignable.
  std::optional<bool> requires_reserved_memory_region;
  friend bool operator==(const DdaProperties&, const DdaProperties&) = default;
};

// The PCI display (class 03) or processing accelerator (class 12) adapter behind a device node:
// `PCI\...` while the host drives it, `PCIP\...` once dismounted for assignment. A dismounted
// GPU has no host driver, so DXCore no longer lists it among `adapters`.
struct PciAdapter {
  std::string instance_id;  // PCI\VEN_10DE&DEV_1EB8&SUBSYS_12A210DE&REV_A1\4&2C9A8E5&0&00F0
  std::string description;  // DEVPKEY_Device_FriendlyName, else DeviceDesc
  std::optional<uint32_t> class_code;       // from the compatible IDs
  std::vector<std::string> location_paths;  // DEVPKEY_Device_LocationPaths
  uint32_t problem_code = 0;                // CM_Get_DevNode_Status; 22 = disabled
  DdaProperties dda;
  std::optional<InterruptCounts> interrupts;              // nullopt: no allocated configuration
  std::optional<std::vector<MemoryRange>> memory_ranges;  // nullopt: no allocated configuration
  // The GPU's own driver package (for a dismounted GPU, the one its PCI\ device node had):
  // DEVPKEY_Device_DriverInfPath ("oem12.inf") and its DriverStore folder.
  std::string driver_inf;
  std::string driver_store_path;

  bool Dismounted() const;              // the instance ID starts with PCIP\ (DDA's enumerator)
  std::string PciLocationPath() const;  // the first location path starting at PCIROOT(
  friend bool operator==(const PciAdapter&, const PciAdapter&) = default;
};

enum class ServiceState { kRunning, kStopped, kAbsent, kUnknown };
const char* ServiceStateName(ServiceState state);  // "running", "stopped", "absent", "unknown"

struct HyperVHost {
  ServiceState vmms = ServiceState::kUnknown;       // Hyper-V Virtual Machine Management
  ServiceState vmcompute = ServiceState::kUnknown;  // Host Compute Service (containers)
  // Whether the host can assign PCI devices (IOMMU with DMA remapping, ACS, native PCIe control):
  // what Get-VMHost shows as IovSupport/IovSupportReasons, read from Hyper-V's WMI class
  // root\virtualization\v2 Msvm_VirtualEthernetSwitchManagementCapabilities. nullopt: unknown.
  std::optional<bool> iov_support;
  std::vector<std::string> iov_support_reasons;
  friend bool operator==(const HyperVHost&, const HyperVHost&) = default;
};

// One runtime table of the containerd config's CRI plugin
// (plugins."io.containerd.grpc.v1.cri".containerd.runtimes.<name>, or config version 3's
// plugins."io.containerd.cri.v1.runtime"...).
struct ContainerdRuntime {
  std::string name;
  std::string runtime_type;                  // "io.containerd.runhcs.v1"
  std::optional<int64_t> sandbox_isolation;  // options.SandboxIsolation: 0 process, 1 hypervisor
  std::vector<std::string> pod_annotations;  // the allow-lists, as written
  std::vector<std::string> container_annotations;
  friend bool operator==(const ContainerdRuntime&, const ContainerdRuntime&) = default;
};

enum class ConfigState { kRead, kAbsent, kUnreadable, kInvalid };
const char* ConfigStateName(ConfigState state);  // "read", "absent", "unreadable", "invalid"

struct ContainerdHost {
  std::string binary;   // containerd.exe
  std::string version;  // "1.7.20" from `containerd --version`; "" when it did not say
  std::string config_path;
  ConfigState config_state = ConfigState::kAbsent;
  std::vector<ContainerdRuntime> runtimes;  // what the config file declares, by name
  std::string shim_path;                    // containerd-shim-runhcs-v1.exe; "" when not found
  std::string hcsshim_version;              // from `<shim> --version`; "" when it did not say
  bool device_util_beside_shim = false;     // device-util.exe in the shim's folder
  friend bool operator==(const ContainerdHost&, const ContainerdHost&) = default;
};

struct HyperVFacts {
  std::vector<PciAdapter> pci_adapters;  // device enumeration order
  HyperVHost hyperv;
  std::optional<ContainerdHost> containerd;  // nullopt: containerd.exe not found
  friend bool operator==(const HyperVFacts&, const HyperVFacts&) = default;
};

struct Snapshot {
  std::string hostname;
  OsVersion os;
  // Schema versions the host compute service reports, ascending. Discovery falls back to the
  // build table (HcsSchemaForBuild) when the service cannot be asked; `hcs_schema_source` says.
  std::vector<SchemaVersion> hcs_schema_versions;
  std::string hcs_schema_source;            // "service" or "build-table"
  std::vector<Adapter> adapters;            // DXCore enumeration order
  std::optional<HyperVFacts> hyperv_facts;  // format 2 only

  // Highest schema version the host supports ({0,0} when the list is empty).
  SchemaVersion MaxSchemaVersion() const;

  friend bool operator==(const Snapshot&, const Snapshot&) = default;
};

// Strict JSON parsing: unknown fields, missing fields and wrong types are errors that name the
// field ("adapters[1].copy_to_vm[0].type: ...").
Result<Snapshot> ParseSnapshot(const std::string& text);
std::string SnapshotToJson(const Snapshot& snapshot, int indent = 2);

// The first location path that starts at a PCI root ("PCIROOT(0)#PCI(1E00)"), or "".
std::string FirstPciRootPath(const std::vector<std::string>& location_paths);

// Hex helpers shared with the native backend: "000000000000d4a1" (16 digits) and back. The
// parser accepts an optional 0x prefix, either case and fewer digits.
std::string FormatLuid(uint64_t luid);
Result<uint64_t> ParseLuid(const std::string& text);

}  // namespace tessera::windows

// The Windows host snapshot: what a Windows host's DirectX adapters look like, as plain values.
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

inline constexpr int kSnapshotVersion = 1;

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

struct Snapshot {
  std::string hostname;
  OsVersion os;
  // Schema versions the host compute service reports, ascending. Discovery falls back to the
  // build table (HcsSchemaForBuild) when the service cannot be asked; `hcs_schema_source` says.
  std::vector<SchemaVersion> hcs_schema_versions;
  std::string hcs_schema_source;  // "service" or "build-table"
  std::vector<Adapter> adapters;  // DXCore enumeration order

  // Highest schema version the host supports ({0,0} when the list is empty).
  SchemaVersion MaxSchemaVersion() const;

  friend bool operator==(const Snapshot&, const Snapshot&) = default;
};

// Strict JSON parsing: unknown fields, missing fields and wrong types are errors that name the
// field ("adapters[1].copy_to_vm[0].type: ...").
Result<Snapshot> ParseSnapshot(const std::string& text);
std::string SnapshotToJson(const Snapshot& snapshot, int indent = 2);

// Hex helpers shared with the native backend: "000000000000d4a1" (16 digits) and back. The
// parser accepts an optional 0x prefix, either case and fewer digits.
std::string FormatLuid(uint64_t luid);
Result<uint64_t> ParseLuid(const std::string& text);

}  // namespace tessera::windows

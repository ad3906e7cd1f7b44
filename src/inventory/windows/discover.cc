// Windows discovery through DXCore, cfgmgr32, the registry and D3DKMT. The Hyper-V facts of
// format 2 are hyperv_discover.h's; only IOV support needs WMI (it lives nowhere else).
//
// initguid.h first: this file instantiates the GUIDs and DEVPROPKEYs it uses.
#include <initguid.h>
// clang-format off
#include <windows.h>
#include <cfgmgr32.h>
#include <devpkey.h>
#include <objbase.h>
// clang-format on

#include <dxcore_interface.h>

#include <cstddef>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "inventory/windows/discover.h"
#include "inventory/windows/hyperv_discover.h"
#include "inventory/windows/native_strings.h"
#include "inventory/windows/native_win32.h"
#include "windows/windows.h"

namespace tessera::windows::native {
namespace {

// DEVPKEY_Gpu_Luid (ntddvdeo.h in the Windows SDK; absent from mingw-w64): the DirectX adapter
// LUID that the graphics kernel sets on the adapter's device node.
DEFINE_DEVPROPKEY(kDevpkeyGpuLuid, 0x60b193cb, 0x5276, 0x4d0f, 0x96, 0xfc, 0xf1, 0x73, 0xab, 0xad,
                  0x3e, 0xc6, 2);

// --- D3DKMT (d3dkmthk.h is a WDK header mingw-w64 lacks; layouts from the public WDK) ---------
typedef UINT D3DKMT_HANDLE;
struct D3dkmtOpenAdapterFromLuid {
  LUID AdapterLuid;
  D3DKMT_HANDLE hAdapter;
};
struct D3dkmtCloseAdapter {
  D3DKMT_HANDLE hAdapter;
};
struct D3dkmtQueryAdapterInfo {
  D3DKMT_HANDLE hAdapter;
  UINT Type;  // KMTQUERYADAPTERINFOTYPE
  void* pPrivateDriverData;
  UINT PrivateDriverDataSize;
};
constexpr UINT kKmtqaitypeQueryRegistry = 48;      // KMTQAITYPE_QUERYREGISTRY
constexpr UINT kQueryRegistryDriverStorePath = 2;  // D3DDDI_QUERYREGISTRY_DRIVERSTOREPATH
constexpr UINT kQueryRegistryStatusSuccess = 0;
constexpr UINT kQueryRegistryStatusBufferOverflow = 1;
struct D3dddiQueryRegistryInfo {
  UINT QueryType;   // D3DDDI_QUERYREGISTRY_TYPE
  UINT QueryFlags;  // D3DDDI_QUERYREGISTRY_FLAGS
  WCHAR ValueName[MAX_PATH];
  ULONG ValueType;
  ULONG PhysicalAdapterIndex;
  ULONG OutputValueSize;  // bytes written, or needed on BUFFER_OVERFLOW
  UINT Status;            // D3DDDI_QUERYREGISTRY_STATUS
  union {
    DWORD OutputDword;
    UINT64 OutputQword;
    WCHAR OutputString[1];
    BYTE OutputBinary[1];
  };
};
static_assert(offsetof(D3dddiQueryRegistryInfo, OutputString) == 544, "WDK layout");
typedef LONG(APIENTRY* PfnOpenAdapterFromLuid)(D3dkmtOpenAdapterFromLuid*);
typedef LONG(APIENTRY* PfnQueryAdapterInfo)(const D3dkmtQueryAdapterInfo*);
typedef LONG(APIENTRY* PfnCloseAdapter)(const D3dkmtCloseAdapter*);

typedef HRESULT(WINAPI* PfnDXCoreCreateAdapterFactory)(REFIID, void**);
typedef LONG(WINAPI* PfnRtlGetVersion)(OSVERSIONINFOW*);
typedef HRESULT(WINAPI* PfnHcsGetServiceProperties)(PCWSTR, PWSTR*, PWSTR*);

uint64_t LuidValue(const LUID& luid) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(luid.HighPart)) << 32) | luid.LowPart;
}

// Every present device node that carries a GPU LUID, keyed by that LUID.
std::map<uint64_t, DEVINST> DevNodesByLuid(std::vector<std::string>& warnings) {
  std::map<uint64_t, DEVINST> out;
  for (const std::wstring& id : DeviceIdList(CM_GETIDLIST_FILTER_PRESENT, warnings)) {
    DEVINST inst = 0;
    if (CM_Locate_DevNodeW(&inst, const_cast<wchar_t*>(id.c_str()), CM_LOCATE_DEVNODE_NORMAL) !=
        CR_SUCCESS) {
      continue;
    }
    std::vector<BYTE> luid;
    if (DevNodeProperty(inst, kDevpkeyGpuLuid, luid) && luid.size() == sizeof(LUID)) {
      LUID value;
      memcpy(&value, luid.data(), sizeof(value));
      out.emplace(LuidValue(value), inst);
    }
  }
  return out;
}

// --- CopyToVm* values -------------------------------------------------------------------------

bool IsCopyToVmName(const std::string& name) {
  for (const char* known : kCopyToVmSubkeys) {
    if (_stricmp(name.c_str(), known) == 0) return true;
  }
  return false;
}

std::vector<std::string> SubkeyNames(HKEY key) {
  std::vector<std::string> out;
  wchar_t name[256];  // registry key names are at most 255 characters
  for (DWORD i = 0;; ++i) {
    DWORD length = 256;
    LONG rc = RegEnumKeyExW(key, i, name, &length, nullptr, nullptr, nullptr, nullptr);
    if (rc != ERROR_SUCCESS) break;
    out.push_back(Narrow(name));
  }
  return out;
}

// Reads every value of <parent>\<name>. Buffers start at the sizes RegQueryInfoKeyW reports and
// grow on ERROR_MORE_DATA (a driver update can rewrite values between the two calls).
void ReadValues(HKEY parent, const std::string& name, const std::string& label,
                std::vector<CopyToVmValue>& out, std::vector<std::string>& warnings) {
  HKEY key = nullptr;
  if (RegOpenKeyExW(parent, Wide(name).c_str(), 0, KEY_READ, &key) != ERROR_SUCCESS) {
    warnings.push_back(label + ": cannot open");
    return;
  }
  DWORD max_name = 0;
  DWORD max_data = 0;
  RegQueryInfoKeyW(key, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, &max_name,
                   &max_data, nullptr, nullptr);
  std::vector<wchar_t> value_name(max_name + 1);
  std::vector<BYTE> data(max_data + sizeof(wchar_t) * 2);
  for (DWORD i = 0;;) {
    DWORD name_length = static_cast<DWORD>(value_name.size());
    DWORD data_length = static_cast<DWORD>(data.size());
    DWORD type = 0;
    LONG rc = RegEnumValueW(key, i, value_name.data(), &name_length, nullptr, &type, data.data(),
                            &data_length);
    if (rc == ERROR_NO_MORE_ITEMS) break;
    if (rc == ERROR_MORE_DATA) {
      value_name.resize(16384);  // the longest value name the registry allows, plus one
      data.resize(std::max<size_t>(data.size() * 2, data_length + sizeof(wchar_t) * 2));
      continue;  // same index again
    }
    if (rc != ERROR_SUCCESS) {
      warnings.push_back(label + ": RegEnumValueW failed with " + std::to_string(rc));
      break;
    }
    CopyToVmValue v;
    v.subkey = label;
    v.name = Narrow(value_name.data());
    std::u16string_view text = AsU16(data.data(), data_length);
    switch (type) {
      case REG_SZ:
        v.type = RegistryType::kSz;
        v.strings = {RegistryString(text)};
        break;
      case REG_EXPAND_SZ:
        v.type = RegistryType::kExpandSz;
        v.strings = {RegistryString(text)};
        break;
      case REG_MULTI_SZ:
        v.type = RegistryType::kMultiSz;
        v.strings = MultiString(text);
        break;
      case REG_DWORD:
        v.type = RegistryType::kDword;
        break;
      case REG_QWORD:
        v.type = RegistryType::kQword;
        break;
      case REG_NONE:
        v.type = RegistryType::kNone;
        break;
      default:
        v.type = RegistryType::kBinary;
        if (type != REG_BINARY) {
          warnings.push_back(label + "\\" + v.name + ": registry type " + std::to_string(type) +
                             " recorded as REG_BINARY");
        }
        break;
    }
    out.push_back(std::move(v));
    ++i;
  }
  RegCloseKey(key);
}

// CopyToVm* subkeys of the driver key, then those one component key down.
std::vector<CopyToVmValue> ReadCopyToVm(DEVINST inst, std::vector<std::string>& warnings,
                                        const std::string& who) {
  std::vector<CopyToVmValue> out;
  HKEY driver = nullptr;
  if (CM_Open_DevNode_Key(inst, KEY_READ, 0, RegDisposition_OpenExisting, &driver,
                          CM_REGISTRY_SOFTWARE) != CR_SUCCESS) {
    warnings.push_back(who + ": cannot open the driver key; no CopyToVm* values read");
    return out;
  }
  std::vector<std::string> components;
  for (const std::string& name : SubkeyNames(driver)) {
    if (IsCopyToVmName(name)) {
      ReadValues(driver, name, name, out, warnings);
    } else {
      components.push_back(name);
    }
  }
  for (const std::string& component : components) {
    HKEY sub = nullptr;
    if (RegOpenKeyExW(driver, Wide(component).c_str(), 0, KEY_READ, &sub) != ERROR_SUCCESS)
      continue;
    for (const std::string& name : SubkeyNames(sub)) {
      if (IsCopyToVmName(name)) ReadValues(sub, name, component + "\\" + name, out, warnings);
    }
    RegCloseKey(sub);
  }
  RegCloseKey(driver);
  return out;
}

// --- DriverStore path through D3DKMT ----------------------------------------------------------

Result<std::string> DriverStorePath(const LUID& luid) {
  auto open = Load<PfnOpenAdapterFromLuid>(L"gdi32.dll", "D3DKMTOpenAdapterFromLuid");
  auto query = Load<PfnQueryAdapterInfo>(L"gdi32.dll", "D3DKMTQueryAdapterInfo");
  auto close = Load<PfnCloseAdapter>(L"gdi32.dll", "D3DKMTCloseAdapter");
  if (open == nullptr || query == nullptr || close == nullptr) {
    return Unavailable("gdi32.dll lacks the D3DKMT adapter functions");
  }
  D3dkmtOpenAdapterFromLuid opened{};
  opened.AdapterLuid = luid;
  LONG status = open(&opened);
  if (status < 0) return Internal("D3DKMTOpenAdapterFromLuid: NTSTATUS " + Hex32(status));
  std::vector<uint64_t> storage((sizeof(D3dddiQueryRegistryInfo) + 7) / 8);
  Result<std::string> result = Internal("D3DKMTQueryAdapterInfo(QUERYREGISTRY) kept overflowing");
  for (int attempt = 0; attempt < 4; ++attempt) {
    auto* info = reinterpret_cast<D3dddiQueryRegistryInfo*>(storage.data());
    memset(storage.data(), 0, storage.size() * sizeof(uint64_t));
    info->QueryType = kQueryRegistryDriverStorePath;
    D3dkmtQueryAdapterInfo request{};
    request.hAdapter = opened.hAdapter;
    request.Type = kKmtqaitypeQueryRegistry;
    request.pPrivateDriverData = info;
    request.PrivateDriverDataSize = static_cast<UINT>(storage.size() * sizeof(uint64_t));
    status = query(&request);
    if (status < 0) {
      result = Internal("D3DKMTQueryAdapterInfo(QUERYREGISTRY): NTSTATUS " + Hex32(status));
      break;
    }
    if (info->Status == kQueryRegistryStatusSuccess) {
      result = RegistryString(AsU16(info->OutputString, info->OutputValueSize));
      break;
    }
    if (info->Status != kQueryRegistryStatusBufferOverflow) {
      result =
          Internal("D3DKMTQueryAdapterInfo(QUERYREGISTRY): status " + std::to_string(info->Status));
      break;
    }
    storage.resize((sizeof(D3dddiQueryRegistryInfo) + info->OutputValueSize + 7) / 8);
  }
  D3dkmtCloseAdapter closing{opened.hAdapter};
  close(&closing);
  return result;
}

// --- Host ---------------------------------------------------------------------------------------

std::string ReadRegistryString(HKEY root, const wchar_t* path, const wchar_t* value) {
  DWORD size = 0;
  if (RegGetValueW(root, path, value, RRF_RT_REG_SZ, nullptr, nullptr, &size) != ERROR_SUCCESS) {
    return "";
  }
  std::vector<BYTE> data(size + sizeof(wchar_t));
  if (RegGetValueW(root, path, value, RRF_RT_REG_SZ, nullptr, data.data(), &size) !=
      ERROR_SUCCESS) {
    return "";
  }
  return RegistryString(AsU16(data.data(), size));
}

void ReadOs(Snapshot& s, std::vector<std::string>& warnings) {
  // GetVersionEx reports what the manifest claims; RtlGetVersion reports the real build.
  auto rtl_get_version = Load<PfnRtlGetVersion>(L"ntdll.dll", "RtlGetVersion");
  OSVERSIONINFOW info{};
  info.dwOSVersionInfoSize = sizeof(info);
  if (rtl_get_version != nullptr && rtl_get_version(&info) == 0) {
    s.os.build = info.dwBuildNumber;
  } else {
    warnings.push_back("RtlGetVersion failed: OS build unknown");
  }
  const wchar_t* kCurrentVersion = L"SOFTWARE\\Microsoft\\Windows NT\\CurrentVersion";
  DWORD ubr = 0;
  DWORD size = sizeof(ubr);
  if (RegGetValueW(HKEY_LOCAL_MACHINE, kCurrentVersion, L"UBR", RRF_RT_REG_DWORD, nullptr, &ubr,
                   &size) == ERROR_SUCCESS) {
    s.os.ubr = ubr;
  }
  s.os.product_name = ReadRegistryString(HKEY_LOCAL_MACHINE, kCurrentVersion, L"ProductName");
  wchar_t name[256];
  DWORD length = 256;
  if (GetComputerNameExW(ComputerNameDnsHostname, name, &length)) s.hostname = Narrow(name);
}

void ReadHcsSchema(Snapshot& s, std::vector<std::string>& warnings) {
  auto get = Load<PfnHcsGetServiceProperties>(L"vmcompute.dll", "HcsGetServiceProperties");
  if (get != nullptr) {
    PWSTR properties = nullptr;
    PWSTR result = nullptr;
    HRESULT hr = get(L"{\"PropertyTypes\":[\"Basic\"]}", &properties, &result);
    if (SUCCEEDED(hr) && properties != nullptr) {
      s.hcs_schema_versions = SchemaVersionsFromServiceProperties(Narrow(properties));
    }
    if (properties != nullptr) CoTaskMemFree(properties);
    if (result != nullptr) CoTaskMemFree(result);
  }
  if (!s.hcs_schema_versions.empty()) {
    s.hcs_schema_source = "service";
    return;
  }
  // The Containers feature is off or vmcompute.dll is missing: use the build table.
  s.hcs_schema_versions = HcsSchemaVersionsForBuild(s.os.build);
  s.hcs_schema_source = "build-table";
  warnings.push_back(
      "the host compute service did not answer; HCS schema versions come from the "
      "build table");
}

}  // namespace

namespace {

// DXCore's view of one hardware adapter: description, PCI IDs, driver version and kind.
void ReadDxCoreAdapter(IDXCoreAdapter* adapter, Adapter& a) {
  size_t size = 0;
  if (SUCCEEDED(adapter->GetPropertySize(DXCoreAdapterProperty::DriverDescription, &size)) &&
      size > 0) {
    std::string description(size, '\0');
    if (SUCCEEDED(adapter->GetProperty(DXCoreAdapterProperty::DriverDescription, size,
                                       description.data()))) {
      a.description = description.c_str();
    }
  }
  if (adapter->IsPropertySupported(DXCoreAdapterProperty::HardwareIDParts)) {
    DXCoreHardwareIDParts parts{};
    adapter->GetProperty(DXCoreAdapterProperty::HardwareIDParts, sizeof(parts), &parts);
    a.vendor_id = static_cast<uint16_t>(parts.vendorID);
    a.device_id = static_cast<uint16_t>(parts.deviceID);
    a.subsystem_id = (parts.subSystemID & 0xffff) << 16 | (parts.subVendorID & 0xffff);
    a.revision = static_cast<uint8_t>(parts.revisionID);
  } else {
    DXCoreHardwareID id{};
    adapter->GetProperty(DXCoreAdapterProperty::HardwareID, sizeof(id), &id);
    a.vendor_id = static_cast<uint16_t>(id.vendorID);
    a.device_id = static_cast<uint16_t>(id.deviceID);
    a.subsystem_id = id.subSysID;
    a.revision = static_cast<uint8_t>(id.revision);
  }
  uint64_t version = 0;
  if (SUCCEEDED(
          adapter->GetProperty(DXCoreAdapterProperty::DriverVersion, sizeof(version), &version))) {
    a.driver_version = FormatDriverVersion(version);
  }
  bool flag = false;
  if (SUCCEEDED(adapter->GetProperty(DXCoreAdapterProperty::IsIntegrated, sizeof(flag), &flag)))
    a.integrated = flag;
  flag = false;
  if (SUCCEEDED(adapter->GetProperty(DXCoreAdapterProperty::IsDetachable, sizeof(flag), &flag)))
    a.detachable = flag;
  a.display = adapter->IsAttributeSupported(DXCORE_ADAPTER_ATTRIBUTE_D3D12_GRAPHICS);
  a.compute = adapter->IsAttributeSupported(DXCORE_ADAPTER_ATTRIBUTE_D3D12_CORE_COMPUTE);
}

// What the adapter's device node says: IDs, driver, location paths, class, CopyToVm* values and
// its DriverStore folder.
void ReadAdapterDevNode(DEVINST inst, const LUID& luid, const std::string& who, Adapter& a,
                        std::vector<std::string>& warnings) {
  a.instance_id = DevNodeString(inst, DEVPKEY_Device_InstanceId);
  a.driver_key = DevNodeString(inst, DEVPKEY_Device_Driver);
  a.driver_service = DevNodeString(inst, DEVPKEY_Device_Service);
  a.location_paths = DevNodeStrings(inst, DEVPKEY_Device_LocationPaths);
  a.class_code = ClassCodeFromCompatibleIds(DevNodeStrings(inst, DEVPKEY_Device_CompatibleIds));
  a.copy_to_vm = ReadCopyToVm(inst, warnings, who);
  auto store = DriverStorePath(luid);
  if (store.ok()) {
    a.driver_store_path = *store;
  } else {
    warnings.push_back(who + ": DriverStore path unknown: " + store.error().message);
  }
}

}  // namespace

Result<Discovery> DiscoverHost() {
  Discovery d;
  ReadOs(d.snapshot, d.warnings);
  ReadHcsSchema(d.snapshot, d.warnings);

  auto create = Load<PfnDXCoreCreateAdapterFactory>(L"dxcore.dll", "DXCoreCreateAdapterFactory");
  if (create == nullptr)
    return Unavailable("dxcore.dll is not available (Windows 10 1803 or later)");
  IDXCoreAdapterFactory* factory = nullptr;
  HRESULT hr = create(IID_IDXCoreAdapterFactory, reinterpret_cast<void**>(&factory));
  if (FAILED(hr)) return Unavailable("DXCoreCreateAdapterFactory: HRESULT " + Hex32(hr));

  // Display adapters and compute-only (MCDM) adapters: every adapter with D3D12 core compute.
  // D3D12_GRAPHICS alone would miss the compute-only ones.
  IDXCoreAdapterList* list = nullptr;
  hr = factory->CreateAdapterList(1, &DXCORE_ADAPTER_ATTRIBUTE_D3D12_CORE_COMPUTE,
                                  IID_IDXCoreAdapterList, reinterpret_cast<void**>(&list));
  if (FAILED(hr)) {
    factory->Release();
    return Internal("IDXCoreAdapterFactory::CreateAdapterList: HRESULT " + Hex32(hr));
  }
  std::map<uint64_t, DEVINST> devnodes = DevNodesByLuid(d.warnings);
  uint32_t count = list->GetAdapterCount();
  for (uint32_t i = 0; i < count; ++i) {
    IDXCoreAdapter* adapter = nullptr;
    if (FAILED(list->GetAdapter(i, IID_IDXCoreAdapter, reinterpret_cast<void**>(&adapter))))
      continue;
    bool hardware = false;
    adapter->GetProperty(DXCoreAdapterProperty::IsHardware, sizeof(hardware), &hardware);
    if (!hardware) {  // Microsoft Basic Render Driver (WARP) and other software adapters
      adapter->Release();
      continue;
    }
    Adapter a;
    LUID luid{};
    adapter->GetProperty(DXCoreAdapterProperty::InstanceLuid, sizeof(luid), &luid);
    a.luid = LuidValue(luid);
    std::string who = "adapter " + FormatLuid(a.luid);
    ReadDxCoreAdapter(adapter, a);
    adapter->Release();

    auto node = devnodes.find(a.luid);
    if (node == devnodes.end()) {
      d.warnings.push_back(who + " (" + a.description +
                           "): no device node carries its LUID; skipped");
      continue;
    }
    ReadAdapterDevNode(node->second, luid, who, a, d.warnings);
    if (a.instance_id.empty()) {
      d.warnings.push_back(who + ": device node has no instance ID; skipped");
      continue;
    }
    d.snapshot.adapters.push_back(std::move(a));
  }
  list->Release();
  factory->Release();
  d.snapshot.hyperv_facts = DiscoverHyperVFacts(d.warnings);
  return d;
}

}  // namespace tessera::windows::native

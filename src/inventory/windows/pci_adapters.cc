// The PCI display (class 03) and processing accelerator (class 12) device nodes, mounted (PCI\) or
// dismounted for assignment (PCIP\), with what Discrete Device Assignment depends on: the PCI
// device properties Microsoft's SurveyDDA.ps1 reads, the allocated interrupts and memory ranges
// (cfgmgr32 resource descriptors, where SurveyDDA uses WMI's Win32_PnPAllocatedResource), and the
// GPU's own driver package.
// clang-format off
#include <windows.h>
#include <cfgmgr32.h>
#include <devpkey.h>
// clang-format on

#include <cwctype>
#include <string>
#include <vector>

#include "inventory/windows/hyperv_discover.h"
#include "inventory/windows/native_hyperv.h"
#include "inventory/windows/native_strings.h"
#include "inventory/windows/native_win32.h"
#include "windows/windows.h"

namespace tessera::windows::native {
namespace {

// pciprop.h's property set {3AB22E31-8264-4b4e-9AF5-A8D2D8E33E62}; mingw-w64's copy lacks pids 31
// and 34, so all three are spelled out here.
constexpr GUID kPciDeviceProperties = {
    0x3ab22e31, 0x8264, 0x4b4e, {0x9a, 0xf5, 0xa8, 0xd2, 0xd8, 0xe3, 0x3e, 0x62}};
constexpr DEVPROPKEY kDeviceType = {kPciDeviceProperties, 1};
constexpr DEVPROPKEY kAcsCompatibleUpHierarchy = {kPciDeviceProperties, 31};
constexpr DEVPROPKEY kRequiresReservedMemoryRegion = {kPciDeviceProperties, 34};

constexpr size_t kMaxRanges = 64;
constexpr ULONG kProblemDisabled = 22;  // CM_PROB_DISABLED

std::optional<uint32_t> PropertyUint32(DEVINST inst, const DEVPROPKEY& key) {
  std::vector<BYTE> data;
  DEVPROPTYPE type = 0;
  if (!DevNodeProperty(inst, key, data, &type) || type != DEVPROP_TYPE_UINT32 ||
      data.size() != sizeof(uint32_t)) {
    return std::nullopt;
  }
  uint32_t value = 0;
  memcpy(&value, data.data(), sizeof(value));
  return value;
}

std::optional<bool> PropertyBool(DEVINST inst, const DEVPROPKEY& key) {
  std::vector<BYTE> data;
  DEVPROPTYPE type = 0;
  if (!DevNodeProperty(inst, key, data, &type) || data.empty()) return std::nullopt;
  if (type == DEVPROP_TYPE_BOOLEAN) return data[0] != 0;
  if (type == DEVPROP_TYPE_UINT32 && data.size() == sizeof(uint32_t)) {
    uint32_t value = 0;
    memcpy(&value, data.data(), sizeof(value));
    return value != 0;
  }
  return std::nullopt;
}

bool StartsWithEnumerator(const std::wstring& id, const wchar_t* enumerator) {
  size_t n = wcslen(enumerator);
  if (id.size() <= n || id[n] != L'\\') return false;
  for (size_t i = 0; i < n; ++i) {
    if (std::towupper(id[i]) != enumerator[i]) return false;
  }
  return true;
}

// The allocated configuration's memory ranges and interrupts; false when there is none (a
// disabled device has no allocated configuration).
bool ReadResources(DEVINST inst, PciAdapter& a) {
  LOG_CONF conf = 0;
  if (CM_Get_First_Log_Conf(&conf, inst, ALLOC_LOG_CONF) != CR_SUCCESS) return false;
  std::vector<MemoryRange> ranges;
  InterruptCounts interrupts;
  RES_DES previous = static_cast<RES_DES>(conf);
  for (;;) {
    RES_DES next = 0;
    RESOURCEID type = 0;
    if (CM_Get_Next_Res_Des(&next, previous, ResType_All, &type, 0) != CR_SUCCESS) break;
    if (previous != static_cast<RES_DES>(conf)) CM_Free_Res_Des_Handle(previous);
    previous = next;
    ULONG size = 0;
    if (CM_Get_Res_Des_Data_Size(&size, next, 0) != CR_SUCCESS || size == 0) continue;
    std::vector<BYTE> data(size);
    if (CM_Get_Res_Des_Data(next, data.data(), size, 0) != CR_SUCCESS) continue;
    if (type == ResType_Mem && size >= sizeof(MEM_DES)) {
      MEM_DES mem;
      memcpy(&mem, data.data(), sizeof(mem));
      if (ranges.size() < kMaxRanges && mem.MD_Alloc_End >= mem.MD_Alloc_Base) {
        ranges.push_back({mem.MD_Alloc_Base, mem.MD_Alloc_End});
      }
    } else if (type == ResType_MemLarge && size >= sizeof(MEM_LARGE_DES)) {
      MEM_LARGE_DES mem;
      memcpy(&mem, data.data(), sizeof(mem));
      if (ranges.size() < kMaxRanges && mem.MLD_Alloc_End >= mem.MLD_Alloc_Base) {
        ranges.push_back({mem.MLD_Alloc_Base, mem.MLD_Alloc_End});
      }
    } else if (type == ResType_IRQ && size >= sizeof(IRQ_DES)) {
      IRQ_DES irq;
      memcpy(&irq, data.data(), sizeof(irq));
      if (IsMessageSignaledIrq(irq.IRQD_Alloc_Num)) {
        ++interrupts.message_signaled;
      } else {
        ++interrupts.line_based;
      }
    }
  }
  if (previous != static_cast<RES_DES>(conf)) CM_Free_Res_Des_Handle(previous);
  CM_Free_Log_Conf_Handle(conf);
  a.memory_ranges = std::move(ranges);
  a.interrupts = interrupts;
  return true;
}

// DEVPKEY_Device_DriverInfPath ("oem12.inf") -> the package's folder in the DriverStore.
typedef BOOL(WINAPI* PfnSetupGetInfDriverStoreLocationW)(PCWSTR, void*, PCWSTR, PWSTR, DWORD,
                                                         PDWORD);

std::string DriverStoreFolder(const std::string& inf) {
  auto locate =
      Load<PfnSetupGetInfDriverStoreLocationW>(L"setupapi.dll", "SetupGetInfDriverStoreLocationW");
  if (locate == nullptr || inf.empty()) return "";
  wchar_t path[MAX_PATH * 2];
  DWORD needed = 0;
  if (!locate(Wide(inf).c_str(), nullptr, nullptr, path, MAX_PATH * 2, &needed)) return "";
  std::string full = Narrow(path);
  size_t slash = full.find_last_of('\\');
  return slash == std::string::npos ? "" : full.substr(0, slash);
}

// A dismounted GPU's node runs the passthrough driver; its own package is the one its PCI\ node
// (now a phantom with the same instance path) had.
void ReadDriverPackage(DEVINST inst, const std::wstring& id, PciAdapter& a,
                       std::vector<std::string>& warnings) {
  DEVINST owner = inst;
  if (a.Dismounted()) {
    std::wstring pci_id = L"PCI\\" + id.substr(id.find(L'\\') + 1);
    if (CM_Locate_DevNodeW(&owner, const_cast<wchar_t*>(pci_id.c_str()),
                           CM_LOCATE_DEVNODE_PHANTOM) != CR_SUCCESS) {
      warnings.push_back(a.instance_id +
                         ": no PCI\\ device node left to name its driver package; "
                         "pass --kernel-drivers to tessera");
      return;
    }
  }
  a.driver_inf = DevNodeString(owner, DEVPKEY_Device_DriverInfPath);
  a.driver_store_path = DriverStoreFolder(a.driver_inf);
  if (a.driver_store_path.empty()) {
    warnings.push_back(a.instance_id + ": DriverStore folder of \"" + a.driver_inf + "\" unknown");
  }
}

}  // namespace

std::vector<PciAdapter> DiscoverPciAdapters(std::vector<std::string>& warnings) {
  std::vector<PciAdapter> out;
  for (const std::wstring& id : DeviceIdList(CM_GETIDLIST_FILTER_PRESENT, warnings)) {
    if (!StartsWithEnumerator(id, L"PCI") && !StartsWithEnumerator(id, L"PCIP")) continue;
    DEVINST inst = 0;
    if (CM_Locate_DevNodeW(&inst, const_cast<wchar_t*>(id.c_str()), CM_LOCATE_DEVNODE_NORMAL) !=
        CR_SUCCESS) {
      continue;
    }
    std::optional<uint32_t> class_code =
        ClassCodeFromCompatibleIds(DevNodeStrings(inst, DEVPKEY_Device_CompatibleIds));
    if (!IsGpuClass(class_code)) continue;
    PciAdapter a;
    a.instance_id = Narrow(id.c_str());
    // The snapshot keeps only IDs that work as vpci-instance-id://ID (printable, no spaces).
    if (auto ref = ParseDeviceString("vpci-instance-id://" + a.instance_id); !ref.ok()) {
      warnings.push_back("skipped a PCI adapter: " + ref.error().message);
      continue;
    }
    a.class_code = class_code;
    a.description = DevNodeString(inst, DEVPKEY_Device_FriendlyName);
    if (a.description.empty()) a.description = DevNodeString(inst, DEVPKEY_Device_DeviceDesc);
    a.location_paths = DevNodeStrings(inst, DEVPKEY_Device_LocationPaths);
    ULONG status = 0;
    ULONG problem = 0;
    if (CM_Get_DevNode_Status(&status, &problem, inst, 0) == CR_SUCCESS &&
        (status & DN_HAS_PROBLEM) != 0) {
      a.problem_code = problem;
    }
    a.dda.device_type = PropertyUint32(inst, kDeviceType);
    a.dda.acs_compatible_up_hierarchy = PropertyUint32(inst, kAcsCompatibleUpHierarchy);
    a.dda.requires_reserved_memory_region = PropertyBool(inst, kRequiresReservedMemoryRegion);
    if (!ReadResources(inst, a)) {
      warnings.push_back(a.instance_id + ": no allocated resources" +
                         (a.problem_code == kProblemDisabled ? " (disabled)" : "") +
                         "; its interrupts and MMIO are unknown");
    }
    ReadDriverPackage(inst, id, a, warnings);
    out.push_back(std::move(a));
  }
  return out;
}

}  // namespace tessera::windows::native

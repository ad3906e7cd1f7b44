// The host's Hyper-V facts: whether the Hyper-V management service (vmms) and the Host Compute
// Service (vmcompute) run, and whether the host can assign PCI devices at all. That last fact is
// what Get-VMHost shows as IovSupport/IovSupportReasons, and Hyper-V publishes it only through
// WMI (root\virtualization\v2, Msvm_VirtualEthernetSwitchManagementCapabilities.IOVSupport and
// IOVSupportReasons); it is the one WMI query discovery makes.
// clang-format off
#include <winsock2.h>
#include <windows.h>
#include <objbase.h>
#include <oleauto.h>
#include <wbemidl.h>
// clang-format on

#include <string>
#include <vector>

#include "inventory/windows/hyperv_discover.h"
#include "inventory/windows/native_win32.h"

namespace tessera::windows::native {
namespace {

constexpr long kWmiTimeoutMs = 15000;

ServiceState QueryService(SC_HANDLE scm, const wchar_t* name) {
  SC_HANDLE service = OpenServiceW(scm, name, SERVICE_QUERY_STATUS);
  if (service == nullptr) {
    return GetLastError() == ERROR_SERVICE_DOES_NOT_EXIST ? ServiceState::kAbsent
                                                          : ServiceState::kUnknown;
  }
  SERVICE_STATUS status{};
  ServiceState state = ServiceState::kUnknown;
  if (QueryServiceStatus(service, &status)) {
    state =
        status.dwCurrentState == SERVICE_RUNNING ? ServiceState::kRunning : ServiceState::kStopped;
  }
  CloseServiceHandle(service);
  return state;
}

// COM objects released when the reader returns, whichever way.
template <typename T>
struct ComPtr {
  T* p = nullptr;
  ~ComPtr() {
    if (p != nullptr) p->Release();
  }
};

struct Bstr {
  BSTR s;
  explicit Bstr(const wchar_t* text) : s(SysAllocString(text)) {}
  ~Bstr() { SysFreeString(s); }
};

void ReadIovSupport(HyperVHost& host, std::vector<std::string>& warnings) {
  HRESULT hr = CoInitializeEx(nullptr, COINIT_MULTITHREADED);
  bool uninitialize = SUCCEEDED(hr);
  // RPC_E_TOO_LATE: security was set already; the defaults then apply.
  CoInitializeSecurity(nullptr, -1, nullptr, nullptr, RPC_C_AUTHN_LEVEL_DEFAULT,
                       RPC_C_IMP_LEVEL_IMPERSONATE, nullptr, EOAC_NONE, nullptr);
  auto fail = [&](const char* what, HRESULT code) {
    warnings.push_back(std::string("IOV support unknown: ") + what + ": HRESULT " +
                       Hex32(static_cast<unsigned long>(code)));
  };
  {
    ComPtr<IWbemLocator> locator;
    ComPtr<IWbemServices> services;
    ComPtr<IEnumWbemClassObject> rows;
    ComPtr<IWbemClassObject> row;
    hr = CoCreateInstance(CLSID_WbemLocator, nullptr, CLSCTX_INPROC_SERVER, IID_IWbemLocator,
                          reinterpret_cast<void**>(&locator.p));
    if (FAILED(hr)) {
      fail("CoCreateInstance(WbemLocator)", hr);
    } else if (FAILED(hr = locator.p->ConnectServer(Bstr(L"ROOT\\virtualization\\v2").s, nullptr,
                                                    nullptr, nullptr, 0, nullptr, nullptr,
                                                    &services.p))) {
      fail("connect to root\\virtualization\\v2 (is Hyper-V installed?)", hr);
    } else {
      CoSetProxyBlanket(services.p, RPC_C_AUTHN_WINNT, RPC_C_AUTHZ_NONE, nullptr,
                        RPC_C_AUTHN_LEVEL_CALL, RPC_C_IMP_LEVEL_IMPERSONATE, nullptr, EOAC_NONE);
      hr = services.p->ExecQuery(Bstr(L"WQL").s,
                                 Bstr(L"SELECT IOVSupport, IOVSupportReasons FROM "
                                      L"Msvm_VirtualEthernetSwitchManagementCapabilities")
                                     .s,
                                 WBEM_FLAG_FORWARD_ONLY | WBEM_FLAG_RETURN_IMMEDIATELY, nullptr,
                                 &rows.p);
      ULONG returned = 0;
      if (FAILED(hr)) {
        fail("query Msvm_VirtualEthernetSwitchManagementCapabilities", hr);
      } else if (FAILED(hr = rows.p->Next(kWmiTimeoutMs, 1, &row.p, &returned)) || returned != 1) {
        fail("no Msvm_VirtualEthernetSwitchManagementCapabilities instance", hr);
      } else {
        VARIANT value;
        VariantInit(&value);
        if (SUCCEEDED(row.p->Get(L"IOVSupport", 0, &value, nullptr, nullptr)) &&
            value.vt == VT_BOOL) {
          host.iov_support = value.boolVal != VARIANT_FALSE;
        }
        VariantClear(&value);
        if (SUCCEEDED(row.p->Get(L"IOVSupportReasons", 0, &value, nullptr, nullptr)) &&
            value.vt == (VT_ARRAY | VT_BSTR) && value.parray != nullptr) {
          LONG low = 0;
          LONG high = -1;
          SafeArrayGetLBound(value.parray, 1, &low);
          SafeArrayGetUBound(value.parray, 1, &high);
          for (LONG i = low; i <= high && host.iov_support_reasons.size() < 32; ++i) {
            BSTR reason = nullptr;
            if (SUCCEEDED(SafeArrayGetElement(value.parray, &i, &reason)) && reason != nullptr) {
              host.iov_support_reasons.push_back(Narrow(reason));
              SysFreeString(reason);
            }
          }
        }
        VariantClear(&value);
      }
    }
  }
  if (uninitialize) CoUninitialize();
}

}  // namespace

HyperVHost DiscoverHyperVHost(std::vector<std::string>& warnings) {
  HyperVHost host;
  SC_HANDLE scm = OpenSCManagerW(nullptr, nullptr, SC_MANAGER_CONNECT);
  if (scm == nullptr) {
    warnings.push_back("OpenSCManagerW failed: Hyper-V service states unknown");
  } else {
    host.vmms = QueryService(scm, L"vmms");
    host.vmcompute = QueryService(scm, L"vmcompute");
    CloseServiceHandle(scm);
  }
  if (host.vmms != ServiceState::kAbsent) ReadIovSupport(host, warnings);
  return host;
}

HyperVFacts DiscoverHyperVFacts(std::vector<std::string>& warnings) {
  HyperVFacts facts;
  facts.pci_adapters = DiscoverPciAdapters(warnings);
  facts.hyperv = DiscoverHyperVHost(warnings);
  facts.containerd = DiscoverContainerd(warnings);
  return facts;
}

}  // namespace tessera::windows::native

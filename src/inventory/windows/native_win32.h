// Small Win32 helpers the discovery files share (Windows only): UTF-16 <-> UTF-8, device node
// properties through cfgmgr32, and functions loaded by name.
#pragma once

// clang-format off
#include <windows.h>
#include <cfgmgr32.h>
#include <devpropdef.h>
// clang-format on

#include <string>
#include <string_view>
#include <vector>

namespace tessera::windows::native {

std::u16string_view AsU16(const void* data, size_t bytes);
std::string Narrow(const wchar_t* text);
std::wstring Wide(const std::string& utf8);
std::string Hex32(unsigned long value);

// A function from a DLL in System32, or nullptr.
template <typename Fn>
Fn Load(const wchar_t* dll, const char* name) {
  HMODULE module = LoadLibraryExW(dll, nullptr, LOAD_LIBRARY_SEARCH_SYSTEM32);
  if (module == nullptr) return nullptr;
  return reinterpret_cast<Fn>(reinterpret_cast<void*>(GetProcAddress(module, name)));
}

// A device node property of any size: asks for the size first, then reads.
bool DevNodeProperty(DEVINST inst, const DEVPROPKEY& key, std::vector<BYTE>& out,
                     DEVPROPTYPE* type_out = nullptr);
std::string DevNodeString(DEVINST inst, const DEVPROPKEY& key);
std::vector<std::string> DevNodeStrings(DEVINST inst, const DEVPROPKEY& key);

// Every device instance ID cfgmgr32 lists with `flags` (CM_GETIDLIST_FILTER_PRESENT: present
// devices only; 0: phantoms too), retrying when devices arrive between the two calls.
std::vector<std::wstring> DeviceIdList(ULONG flags, std::vector<std::string>& warnings);

}  // namespace tessera::windows::native

#include "inventory/windows/native_win32.h"

#include <cstdio>

#include "inventory/windows/native_strings.h"

namespace tessera::windows::native {

std::u16string_view AsU16(const void* data, size_t bytes) {
  return {static_cast<const char16_t*>(data), bytes / sizeof(char16_t)};
}

std::string Narrow(const wchar_t* text) {
  return Utf16ToUtf8(AsU16(text, wcslen(text) * sizeof(wchar_t)));
}

std::wstring Wide(const std::string& utf8) {
  int n = MultiByteToWideChar(CP_UTF8, 0, utf8.c_str(), -1, nullptr, 0);
  std::wstring out(n > 0 ? n - 1 : 0, L'\0');
  if (n > 1) MultiByteToWideChar(CP_UTF8, 0, utf8.c_str(), -1, out.data(), n);
  return out;
}

std::string Hex32(unsigned long value) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08lx", value);
  return buf;
}

bool DevNodeProperty(DEVINST inst, const DEVPROPKEY& key, std::vector<BYTE>& out,
                     DEVPROPTYPE* type_out) {
  DEVPROPTYPE type = 0;
  ULONG size = 0;
  CONFIGRET cr = CM_Get_DevNode_PropertyW(inst, &key, &type, nullptr, &size, 0);
  if (cr != CR_BUFFER_SMALL || size == 0) return false;
  out.assign(size, 0);
  cr = CM_Get_DevNode_PropertyW(inst, &key, &type, out.data(), &size, 0);
  if (cr != CR_SUCCESS) return false;
  out.resize(size);
  if (type_out != nullptr) *type_out = type;
  return true;
}

std::string DevNodeString(DEVINST inst, const DEVPROPKEY& key) {
  std::vector<BYTE> data;
  DEVPROPTYPE type = 0;
  if (!DevNodeProperty(inst, key, data, &type) || type != DEVPROP_TYPE_STRING) return "";
  return RegistryString(AsU16(data.data(), data.size()));
}

std::vector<std::string> DevNodeStrings(DEVINST inst, const DEVPROPKEY& key) {
  std::vector<BYTE> data;
  DEVPROPTYPE type = 0;
  if (!DevNodeProperty(inst, key, data, &type) || type != DEVPROP_TYPE_STRING_LIST) return {};
  return MultiString(AsU16(data.data(), data.size()));
}

std::vector<std::wstring> DeviceIdList(ULONG flags, std::vector<std::string>& warnings) {
  std::vector<wchar_t> ids;
  for (int attempt = 0; attempt < 4; ++attempt) {
    ULONG length = 0;
    if (CM_Get_Device_ID_List_SizeW(&length, nullptr, flags) != CR_SUCCESS) {
      warnings.push_back("CM_Get_Device_ID_List_SizeW failed: no device node details");
      return {};
    }
    ids.assign(length, L'\0');
    CONFIGRET cr = CM_Get_Device_ID_ListW(nullptr, ids.data(), length, flags);
    if (cr == CR_SUCCESS) break;
    if (cr != CR_BUFFER_SMALL) {
      warnings.push_back("CM_Get_Device_ID_ListW failed: CONFIGRET " + std::to_string(cr));
      return {};
    }
    ids.clear();  // devices arrived between the two calls: ask again
  }
  std::vector<std::wstring> out;
  for (const wchar_t* id = ids.data(); id < ids.data() + ids.size() && *id != L'\0';
       id += wcslen(id) + 1) {
    out.emplace_back(id);
  }
  return out;
}

}  // namespace tessera::windows::native

// The byte-level pieces of Windows discovery that need no Windows: UTF-16 registry and property
// strings to UTF-8, REG_MULTI_SZ splitting, the PCI class from compatible IDs, DXCore's driver
// version and the HCS service's schema versions. Compiled into the mingw-w64 discovery tool and
// into the Linux tests.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "windows/snapshot.h"

namespace tessera::windows::native {

// UTF-16 (as the registry and cfgmgr32 store it) to UTF-8; unpaired surrogates become U+FFFD.
std::string Utf16ToUtf8(std::u16string_view text);

// A REG_SZ / DEVPROP_TYPE_STRING value: everything up to the first NUL.
std::string RegistryString(std::u16string_view data);

// A REG_MULTI_SZ / DEVPROP_TYPE_STRING_LIST value: NUL-separated strings ending in an empty one.
// Data that lacks the final terminators (the registry does not enforce them) still yields every
// string; empty strings inside the list end it, as Windows' own readers do.
std::vector<std::string> MultiString(std::u16string_view data);

// The 24-bit class code from PCI compatible IDs ("PCI\VEN_10DE&CC_030200", "PCI\CC_0302"):
// the first 6-digit CC_ wins, else a 4-digit one with prog-if 00.
std::optional<uint32_t> ClassCodeFromCompatibleIds(const std::vector<std::string>& ids);

// DXCore's DriverVersion (four 16-bit parts, most significant first) as "31.0.15.3770".
std::string FormatDriverVersion(uint64_t version);

// SupportedSchemaVersions from HcsGetServiceProperties' JSON, wherever it sits in the document;
// ascending; empty when absent or malformed.
std::vector<SchemaVersion> SchemaVersionsFromServiceProperties(const std::string& json);

}  // namespace tessera::windows::native

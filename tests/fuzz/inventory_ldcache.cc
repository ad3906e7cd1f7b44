// glibc ld.so.cache bytes (legacy and new format) as they could appear under a host root.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "inventory/parsers.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto entries = tessera::inventory::ParseLdCache(bytes);
  if (entries) {
    for (const auto& entry : *entries)
      (void)entry.arch();
  }
  return 0;
}

// pci.ids text under a host root with the IDs to look up in the first four bytes.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "inventory/parsers.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  uint16_t vendor = static_cast<uint16_t>(data[0] << 8 | data[1]);
  uint16_t device = static_cast<uint16_t>(data[2] << 8 | data[3]);
  std::string_view ids(reinterpret_cast<const char*>(data) + 4, size - 4);
  (void)tessera::inventory::LookupPciIds(ids, vendor, device);
  return 0;
}

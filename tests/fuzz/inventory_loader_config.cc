// What the dynamic loader is configured with, as it could appear under a host root or in a
// process's environment: ld.so.conf text, LD_LIBRARY_PATH/PATH values, a library's ELF header.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "inventory/parsers.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  (void)tessera::inventory::ParseLdSoConf(bytes);
  (void)tessera::inventory::SplitSearchPath(bytes);
  (void)tessera::inventory::ElfLibraryArch(bytes);
  return 0;
}

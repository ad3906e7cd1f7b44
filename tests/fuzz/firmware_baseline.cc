// A baseline file from the node's disk: anything accepted is in canonical form (formatting it
// gives back the very bytes read), names a canonical PCI address and holds a digest.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "firmware/firmware.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::firmware;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = ParseBaseline(text);
  if (!parsed) return 0;
  if (FormatBaseline(*parsed) != text) __builtin_trap();
  if (!IsDigest(parsed->option_rom) || parsed->recorded_unix_s < 0) __builtin_trap();
  auto address = CanonicalPciAddress(parsed->pci_address, "pci_address");
  if (!address || *address != parsed->pci_address) __builtin_trap();
  return 0;
}

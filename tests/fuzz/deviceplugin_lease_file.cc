// The node-local lease file: parsed leases only name canonical PCI addresses and known states.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "deviceplugin/deviceplugin.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto leases = tessera::deviceplugin::ParseLeaseFile(text);
  if (!leases) {
    if (leases.error().message.empty()) __builtin_trap();
    return 0;
  }
  for (const auto& [pci, lease] : *leases) {
    if (pci.size() != 12 || pci[4] != ':' || pci[7] != ':' || pci[10] != '.') __builtin_trap();
    std::string_view name = tessera::deviceplugin::LeaseStateName(lease.state);
    if (name.empty()) __builtin_trap();
  }
  return 0;
}

// The device plugin's GPU health file: parsed records only name canonical PCI addresses, keep
// the history bound, and serialize to a file that parses back to the same records.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "deviceplugin/gpu_health_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto gpus = tessera::deviceplugin::ParseGpuHealth(text);
  if (!gpus) {
    if (gpus.error().message.empty()) __builtin_trap();
    return 0;
  }
  for (const auto& [pci, gpu] : *gpus) {
    if (pci.size() != 12 || pci[4] != ':' || pci[7] != ':' || pci[10] != '.') __builtin_trap();
    if (gpu.history.size() > tessera::health::kMaxHistory) __builtin_trap();
  }
  auto again =
      tessera::deviceplugin::ParseGpuHealth(tessera::deviceplugin::SerializeGpuHealth(*gpus));
  if (!again || *again != *gpus) __builtin_trap();
  return 0;
}

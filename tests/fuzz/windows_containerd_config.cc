// The containerd config as tessera-windows-discover.exe reads it on a Windows host (only its CRI
// runtime tables): any text parses or is refused without crashing, and what it keeps stays within
// the bounds the snapshot parser accepts.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "inventory/windows/native_hyperv.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  auto runtimes = tessera::windows::native::ContainerdRuntimesFromConfig(text);
  if (!runtimes.ok()) return 0;
  if (runtimes->size() > 64) std::abort();
  for (const auto& r : *runtimes) {
    if (r.name.empty() || r.pod_annotations.size() > 64 || r.container_annotations.size() > 64) {
      std::abort();
    }
    if (r.sandbox_isolation && (*r.sandbox_isolation < 0 || *r.sandbox_isolation > 0xffff)) {
      std::abort();
    }
  }
  tessera::windows::native::VersionFromOutput(text);
  return 0;
}

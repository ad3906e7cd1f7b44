// The eight GPUs of the HGX H100 fixture host (tests/fixtures/hosts/hgx-h100-dgx) as tests name
// them: their PCI addresses in order, and the UUIDs tests give them in the stand-in NVML.
#pragma once

#include <cstdio>
#include <string>

namespace tessera::testing {

// PCI addresses of the fixture's GPUs, in PCI order (18, 2a, 3a, 5d, 9a, ab, ba, db).
inline constexpr const char* kHgxGpuPci[8] = {"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0",
                                              "0000:5d:00.0", "0000:9a:00.0", "0000:ab:00.0",
                                              "0000:ba:00.0", "0000:db:00.0"};

// The UUID of GPU `index` (in PCI order): GPU-5e4b7c1<index>-3c2a-4d8e-9f10-a1b2c3d4e5f<index>.
inline std::string HgxGpuUuid(int index) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "GPU-5e4b7c1%d-3c2a-4d8e-9f10-a1b2c3d4e5f%d", index, index);
  return buf;
}

}  // namespace tessera::testing

// Native Windows discovery: DXCore adapters joined with their PnP device nodes (cfgmgr32), the
// CopyToVm* registry values under each driver key, and the DriverStore path from the kernel
// graphics stack. Produces a windows::Snapshot. Windows only (built with mingw-w64).
#pragma once

#include <string>
#include <vector>

#include "common/error.h"
#include "windows/snapshot.h"

namespace tessera::windows::native {

struct Discovery {
  Snapshot snapshot;
  std::vector<std::string> warnings;  // partial failures: the adapter is kept, the field is empty
};

// Fails only when DXCore itself is unavailable (dxcore.dll ships with Windows 10 1803+).
Result<Discovery> DiscoverHost();

}  // namespace tessera::windows::native

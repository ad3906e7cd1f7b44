// Health probes: presence of each device's sysfs entry and device nodes. GPU faults come from
// the health module's Monitor (fault_keeper.cc), which reads NVML through src/nvml.
#include <sys/stat.h>

#include "deviceplugin/deviceplugin.h"

namespace tessera::deviceplugin {

std::string PresenceKey(const PhysicalDevice& device) {
  return device.mig ? device.pci_address + "#" + device.id : device.pci_address;
}

std::map<std::string, bool> ProbePresence(const std::vector<PhysicalDevice>& devices) {
  std::map<std::string, bool> out;
  for (const auto& device : devices) {
    bool present = true;
    for (const auto& path : device.watch_paths) {
      struct stat st;
      // stat follows the sysfs symlink: a dangling link is a removed device.
      if (::stat(path.c_str(), &st) != 0) {
        present = false;
        break;
      }
    }
    out[PresenceKey(device)] = present;
  }
  return out;
}

}  // namespace tessera::deviceplugin

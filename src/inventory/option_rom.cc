#include "inventory/host_root.h"
#include "inventory/inventory.h"
#include "inventory/parsers.h"

namespace tessera::inventory {

Result<std::optional<std::string>> ReadOptionRom(const std::string& root,
                                                 const std::string& pci_address) {
  if (!IsPciAddress(pci_address))
    return InvalidArgument("PCI address \"" + pci_address +
                           "\": want dddd:bb:dd.f in lowercase hex");
  HostRoot host(root);
  const std::string device = "/sys/bus/pci/devices/" + pci_address;
  if (!host.Exists(device))
    return NotFound("PCI device " + pci_address + " not found under " + root);
  const std::string path = device + "/rom";
  if (!host.Exists(path)) return std::optional<std::string>();
  const bool sysfs = host.OnSysfs(path);
  if (sysfs) {
    if (auto enabled = host.WriteAttribute(path, "1"); !enabled)
      return enabled.error().WithContext("enable the option ROM");
  }
  // A ROM BAR is at most a few MiB (16 MiB leaves room); the kernel returns only the image.
  auto content = host.ReadFile(path, 16u << 20);
  if (sysfs) (void)host.WriteAttribute(path, "0");
  if (!content) return content.error();
  return std::optional<std::string>(std::move(*content));
}

}  // namespace tessera::inventory

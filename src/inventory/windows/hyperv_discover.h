// Format 2's Hyper-V facts on a Windows host (Windows only): the PCI display and compute adapters
// with their Discrete Device Assignment properties (pci_adapters.cc), the Hyper-V services and IOV
// support (hyperv_host.cc) and containerd with its shim (containerd_host.cc). Partial failures are
// warnings and leave the fact unknown; nothing here stops discovery.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "windows/snapshot.h"

namespace tessera::windows::native {

std::vector<PciAdapter> DiscoverPciAdapters(std::vector<std::string>& warnings);
HyperVHost DiscoverHyperVHost(std::vector<std::string>& warnings);
std::optional<ContainerdHost> DiscoverContainerd(std::vector<std::string>& warnings);

// All three.
HyperVFacts DiscoverHyperVFacts(std::vector<std::string>& warnings);

}  // namespace tessera::windows::native

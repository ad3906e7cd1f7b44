// tessera-lease-sync's node lease file from a GpuLease list the API server sent: whatever the
// list holds, the file written is one the device plugin and the DRA plugin read (a refused file
// would keep stale leases), and names only canonical PCI addresses.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "backends/kubernetes/node_gpus.h"
#include "common/pci_address.h"
#include "deviceplugin/deviceplugin.h"
#include "kubernetes/responses.h"
#include "nodeagent/lease_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto list = k8s::ParseResponseJson(text, "GET gpuleases");
  if (!list) return 0;
  k8s::NodeGpus known;
  known.gpus.push_back({"0000:18:00.0", "GPU-1", "H100", 0, {}, {}});
  auto file = k8s::LeaseFileFor(*list, "node-1", &known);
  auto leases = deviceplugin::ParseLeaseFile(file);
  if (!leases) __builtin_trap();
  for (const auto& [pci, lease] : *leases) {
    if (!IsPciAddress(pci)) __builtin_trap();
  }
  return 0;
}

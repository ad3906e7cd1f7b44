// Fuzzes the reader of a ResourceClaim's allocation: anyone who may update a claim's status in
// the tenant namespace writes it. Any text is an allocation within the bounds or an error naming
// the field; a mismatch reason never echoes the input whole.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "backends/kubernetes/claims.h"
#include "common/untrusted_text.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace k8s = tessera::k8s;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  if (!tessera::CheckJsonNesting(text, "claim").ok()) return 0;
  k8s::Json claim = k8s::Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (claim.is_discarded()) return 0;
  auto allocation = k8s::ClaimAllocationOf(claim);
  if (!allocation) {
    if (allocation.error().message.empty() || allocation.error().message.size() > 400)
      __builtin_trap();
    return 0;
  }
  if (allocation->devices.size() > 32) __builtin_trap();
  if (!allocation->allocated && !allocation->devices.empty()) __builtin_trap();
  k8s::PinnedClaim pinned{"c", "ns", "node-a", {"0000:18:00.0"}, false, "c"};
  std::string why = k8s::AllocationMismatch(pinned, *allocation);
  if (why.size() > 1200) __builtin_trap();
  for (const auto& pci : k8s::AllocatedPciAddresses(*allocation)) {
    if (k8s::PciAddressOfDraDevice(k8s::DraDeviceName(pci)) != pci) __builtin_trap();
  }
  return 0;
}

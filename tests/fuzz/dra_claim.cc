// ResourceClaim JSON from the API server: parsed claims respect the bounds, and a plan over
// them never names a device this (empty) node does not have.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "dra/dra.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto claim = tessera::dra::ParseResourceClaim(text);
  if (!claim) {
    // Errors name the field without echoing the input whole.
    if (claim.error().message.empty() || claim.error().message.size() > 400) __builtin_trap();
    return 0;
  }
  if (claim->uid.empty() || claim->name.empty() || claim->namespace_name.empty()) __builtin_trap();
  if (claim->results.size() > tessera::dra::kMaxResults) __builtin_trap();
  if (!claim->allocated && !claim->results.empty()) __builtin_trap();
  tessera::dra::NodeDevices node;
  tessera::dra::DeviceState state;
  tessera::dra::PrepareContext context{"gpu.tessera.dev", "node-a", &node, &state};
  auto plan =
      tessera::dra::PlanPrepare({claim->namespace_name, claim->name, claim->uid}, *claim, context);
  if (plan) __builtin_trap();  // an empty node has nothing to prepare
  return 0;
}

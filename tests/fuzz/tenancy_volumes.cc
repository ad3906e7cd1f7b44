// A submission's `volumes`: anything accepted has valid mount paths, and resolving it against
// an entitlement list either refuses (naming a volume) or yields only entitled exports.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tenancy/tenancy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::tenancy;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = ParseVolumeRequests(text);
  if (!parsed) return 0;
  for (const auto& request : *parsed) {
    if (!ValidateMountPath(request.mount_path).ok()) __builtin_trap();
    if (!ValidateExportName(request.name).ok()) __builtin_trap();
  }
  StorageEntitlements entitlements;
  entitlements.nfs.push_back({"data", "10.0.0.1", "/exports/data", 0, false});
  entitlements.nfs.push_back({"models", "10.0.0.1", "/exports/models", 2049, true});
  auto resolved = ResolveVolumes("fuzz", entitlements, *parsed);
  if (!resolved) return 0;
  if (resolved->size() != parsed->size()) __builtin_trap();
  for (const auto& volume : *resolved) {
    if (volume.source.name != "data" && volume.source.name != "models") __builtin_trap();
    if (volume.source.read_only && !volume.read_only) __builtin_trap();
  }
  if (ContainerVolumeArgs(*resolved).size() != 2 * resolved->size()) __builtin_trap();
  return 0;
}

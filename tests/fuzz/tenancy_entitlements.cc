// The admin storage-entitlement body: anything accepted must be valid, survive its own JSON and
// produce podman volume options that cannot smuggle extra mount options.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tenancy/tenancy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::tenancy;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = ParseStorageEntitlements(text);
  if (!parsed) return 0;
  for (const auto& nfs : parsed->nfs) {
    if (!ValidateNfsExport(nfs).ok()) __builtin_trap();
    // The only commas in o= are the ones we put there.
    const std::string o = NfsVolumeOptions(nfs).at("o");
    size_t commas = 0;
    for (char c : o)
      commas += c == ',';
    if (commas != (nfs.port != 0 ? 1u : 0u) + (nfs.read_only ? 1u : 0u)) __builtin_trap();
    if (VolumeCreateArgs("fuzz", nfs).back() != PodmanVolumeName("fuzz", nfs.name)) {
      __builtin_trap();
    }
  }
  auto again = ParseStorageEntitlements(StorageEntitlementsToJson(*parsed));
  if (!again || !(*again == *parsed)) __builtin_trap();
  return 0;
}

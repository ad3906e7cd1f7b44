// PodResources List answers from kubelet: whatever the bytes, the values respect the bounds and
// the device IDs of a Pod come back sorted and unique.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "podresources/podresources.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace pr = tessera::podresources;
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto list = pr::ParseListResponse(bytes);
  if (!list) {
    if (list.error().message.empty() || list.error().message.size() > 400) __builtin_trap();
    return 0;
  }
  if (list->pods.size() > pr::kMaxPods) __builtin_trap();
  for (const auto& warning : list->warnings) {
    if (warning.size() > 400) __builtin_trap();  // never the whole input
  }
  for (const auto& pod : list->pods) {
    if (pod.name.empty() || pod.name.size() > pr::kMaxNameBytes) __builtin_trap();
    if (pod.namespace_name.empty() || pod.namespace_name.size() > pr::kMaxNameBytes)
      __builtin_trap();
    if (list->Find(pod.namespace_name, pod.name) == nullptr) __builtin_trap();
    for (const auto& devices : pod.devices) {
      if (devices.ids.size() > pr::kMaxIdsPerContainer) __builtin_trap();
      for (const auto& id : devices.ids) {
        if (id.empty() || id.size() > pr::kMaxIdBytes) __builtin_trap();
      }
      auto ids = pr::DeviceIds(pod, devices.resource);
      if (!std::is_sorted(ids.begin(), ids.end())) __builtin_trap();
      if (std::adjacent_find(ids.begin(), ids.end()) != ids.end()) __builtin_trap();
    }
  }
  return 0;
}

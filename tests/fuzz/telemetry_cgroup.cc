// /proc/<pid>/cgroup: whatever the bytes, a container found has the shape the runtimes give it
// (64 lowercase hex digits, a Pod UID of 32 or 36 [0-9a-f-]), and every line naming a container
// names that one (a Pod-only line, its Pod).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "telemetry/telemetry.h"

namespace {

bool Hex(std::string_view text, bool dash) {
  for (char c : text)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (dash && c == '-'))) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace t = tessera::telemetry;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto found = t::ContainerOfProcCgroup(text);
  if (!found) return 0;
  if (found->container_id.empty() && found->pod_uid.empty()) __builtin_trap();
  if (!found->container_id.empty() &&
      (found->container_id.size() != 64 || !Hex(found->container_id, false)))
    __builtin_trap();
  if (!found->pod_uid.empty() &&
      ((found->pod_uid.size() != 32 && found->pod_uid.size() != 36) || !Hex(found->pod_uid, true)))
    __builtin_trap();
  // Every line that names a container agrees with the answer.
  for (std::string_view path : t::CgroupPathsOf(text)) {
    auto one = t::ContainerOfCgroupPath(path);
    if (!one) continue;
    if (one->pod_uid != found->pod_uid) __builtin_trap();
    if (!one->container_id.empty() && one->container_id != found->container_id) __builtin_trap();
  }
  return 0;
}

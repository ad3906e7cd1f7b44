// A daemon's config, its hash, its limit commands and where its files live. Pure.
#include <fmt/format.h>

#include "common/untrusted_text.h"
#include "firmware/firmware.h"
#include "mps/mps.h"

namespace tessera::mps {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

bool IsHex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// A MIG device's UUID as NVML gives it since R470: "MIG-" and a UUID's 8-4-4-4-12 hex groups.
bool IsMigUuid(std::string_view uuid) {
  if (uuid.size() != 40 || !uuid.starts_with("MIG-")) return false;
  for (size_t i = 4; i < uuid.size(); ++i) {
    const bool dash = i == 12 || i == 17 || i == 22 || i == 27;
    if (dash ? uuid[i] != '-' : !IsHex(uuid[i])) return false;
  }
  return true;
}

// NVML's GPU UUIDs: "GPU-" then hex groups ("GPU-8f6b2c1d-4e5f-…"), or a MIG device's "MIG-"
// then hex groups (the older "MIG-GPU-…/<gi>/<ci>" form has slashes and is refused). It names a
// directory, so nothing else gets through.
bool IsGpuUuid(std::string_view uuid) {
  if (uuid.starts_with("MIG-")) return IsMigUuid(uuid);
  if (!uuid.starts_with("GPU-") || uuid.size() < 12 || uuid.size() > 80) return false;
  for (char c : uuid.substr(4))
    if (!IsHex(c) && c != '-') return false;
  return uuid[4] != '-' && uuid.back() != '-';
}

}  // namespace

bool IsMigDevice(std::string_view uuid) {
  return IsMigUuid(uuid);
}

Status CheckConfig(const DaemonConfig& config) {
  if (!IsGpuUuid(config.gpu_uuid))
    return InvalidArgument("gpu_uuid: \"" + Excerpt(config.gpu_uuid, 80) +
                           "\" is not an NVML GPU or MIG device UUID");
  if (config.pinned_memory_limit_bytes < kMiB)
    return InvalidArgument("pinned memory limit: under 1 MiB");
  if (config.active_thread_percentage < 1 || config.active_thread_percentage > 100)
    return InvalidArgument(
        "active thread percentage: " + std::to_string(config.active_thread_percentage) +
        " is out of range (1..100)");
  return Ok();
}

std::string ConfigHash(const DaemonConfig& config) {
  // The hash covers what a client's limits depend on; the PCI address only says how to reach
  // the GPU.
  return firmware::DigestOf(fmt::format(
      "tessera-mps-config 1\ngpu {}\npinned_memory {}\nactive_thread_percentage {}\n",
      config.gpu_uuid, config.pinned_memory_limit_bytes, config.active_thread_percentage));
}

std::vector<std::string> DefaultLimitCommands(const DaemonConfig& config) {
  // By index, not UUID: the daemon sees only its GPU, and NVIDIA's plugin found UUIDs ignored
  // by this command (k8s-device-plugin PR #572). MiB, rounded down: never above the share.
  return {fmt::format("set_default_device_pinned_mem_limit 0 {}M",
                      config.pinned_memory_limit_bytes / kMiB),
          fmt::format("set_default_active_thread_percentage {}", config.active_thread_percentage)};
}

Result<Paths> PathsFor(const std::string& root, const std::string& gpu_uuid) {
  if (!IsGpuUuid(gpu_uuid))
    return InvalidArgument("\"" + Excerpt(gpu_uuid, 80) +
                           "\" is not an NVML GPU or MIG device UUID");
  Paths paths;
  paths.dir = root + "/" + gpu_uuid;
  paths.pipe = paths.dir + "/pipe";
  paths.log = paths.dir + "/log";
  paths.shm = paths.dir + "/shm";
  paths.ready = paths.dir + "/ready";
  paths.state = paths.dir + "/daemon.state";
  return paths;
}

}  // namespace tessera::mps

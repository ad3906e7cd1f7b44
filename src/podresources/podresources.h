// kubelet's PodResources API (v1) as a node agent reads it: which device IDs kubelet gave the
// containers of each Pod on this node. This is the truth about a device-plugin Pod's GPUs, since
// kubelet, not the control plane, picks the IDs from a resource's healthy devices.
//
// Every answer is untrusted input: sizes, counts and strings are bounded, and entries that break
// a bound are left out with a warning instead of failing the whole answer.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace tessera::podresources {

inline constexpr const char* kDefaultSocket = "/var/lib/kubelet/pod-resources/kubelet.sock";
// kubelet's own limit on a PodResources answer (podresources.DefaultMaxMsgSize).
inline constexpr size_t kMaxAnswerBytes = 16 << 20;
inline constexpr size_t kMaxPods = 4096;
inline constexpr size_t kMaxIdsPerContainer = 256;
inline constexpr size_t kMaxNameBytes = 253;  // DNS subdomain names
inline constexpr size_t kMaxIdBytes = 256;
inline constexpr size_t kMaxClaimDevicesPerContainer = 256;

struct ContainerDevices {
  std::string container;
  std::string resource;  // e.g. "nvidia.com/gpu"
  std::vector<std::string> ids;
  friend bool operator==(const ContainerDevices&, const ContainerDevices&) = default;
};

// A device of a ResourceClaim (DRA) that kubelet prepared for a container.
struct ClaimDevice {
  std::string container;
  std::string claim_namespace;
  std::string claim_name;
  std::string driver;  // e.g. "gpu.tessera.dev"
  std::string pool;    // the driver's pool, the node's name for node-local devices
  std::string device;  // the device's name in the driver's ResourceSlice
  friend bool operator==(const ClaimDevice&, const ClaimDevice&) = default;
};

struct PodDevices {
  std::string namespace_name;
  std::string name;
  std::vector<ContainerDevices> devices;        // every container's device-plugin devices
  std::vector<ClaimDevice> claim_devices = {};  // every container's DRA devices
};

struct PodList {
  std::vector<PodDevices> pods;
  std::vector<std::string> warnings;  // entries left out, naming the bound they broke
  const PodDevices* Find(std::string_view namespace_name, std::string_view name) const;
};

// Pure: decodes a serialized ListPodResourcesResponse. Fails only on bytes that are not one.
Result<PodList> ParseListResponse(std::string_view bytes);

// The device IDs of `resource` in every container of the Pod, sorted and without duplicates.
std::vector<std::string> DeviceIds(const PodDevices& pod, std::string_view resource);

// Calls PodResourcesLister.List on kubelet's socket. Unavailable when kubelet does not answer.
Result<PodList> List(const std::string& socket_path, std::chrono::milliseconds timeout);

}  // namespace tessera::podresources

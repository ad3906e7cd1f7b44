// The control plane's side of DRA (resource.k8s.io/v1): which GPU API a cluster gets, the
// ResourceClaim that pins a lease's GPUs, and reading back what the scheduler allocated. Pure:
// JSON in, JSON or values out.
//
// Facts relied on: a claim request `exactly{deviceClassName, allocationMode ExactCount, count,
// selectors[{cel{expression}}]}`; CEL sees device.driver and
// device.attributes["<domain>"].<name>, and the standard attribute
// resource.kubernetes.io/pciBusID; the allocation is status.allocation.devices.results[{request,
// driver, pool, device}]; a Pod names claims in spec.resourceClaims and containers in
// resources.claims.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "backends/kubernetes/objects.h"
#include "kubernetes/client.h"

namespace tessera::k8s {

inline constexpr const char* kDraDriver = "gpu.tessera.dev";
inline constexpr const char* kGpuDeviceClass = "gpu.tessera.dev";
inline constexpr const char* kVfioDeviceClass = "vfio.gpu.tessera.dev";
inline constexpr const char* kClaimRequestName = "gpus";

// resource.k8s.io/v1 resourceclaims (namespaced).
Resource ResourceClaims();

enum class GpuApi { kDra, kDevicePlugin };
const char* GpuApiName(GpuApi api);  // "dra", "device-plugin"
Result<GpuApi> ParseGpuApi(std::string_view name);
// The default for a cluster: DRA when API discovery (GET /apis, an APIGroupList) lists
// resource.k8s.io/v1, else the device plugin.
GpuApi DefaultGpuApi(const Json& api_group_list);

// The DRA device name of a GPU on its node (the driver's naming): "0000:18:00.0" ->
// "gpu-0000-18-00-0", and back (empty when the name has another shape).
std::string DraDeviceName(std::string_view pci_address);
std::string PciAddressOfDraDevice(std::string_view device_name);

struct PinnedClaim {
  std::string name;                        // the ResourceClaim's name (the lease's)
  std::string namespace_;                  // the tenant namespace
  std::string node;                        // the node, and so the driver's pool
  std::vector<std::string> pci_addresses;  // the leased GPUs
  bool vfio = false;                       // Kata: the vfio device class
  std::string lease_name;
};

// CEL admitting only the listed GPUs of our driver, by PCI bus ID. Within one node's pool a bus
// ID names one GPU, and the Pod's node affinity keeps the scheduler on that node.
std::string PinnedSelector(const std::vector<std::string>& pci_addresses);
// One request "gpus": ExactCount N of the device class, with the pinned selector.
Json BuildPinnedClaim(const PinnedClaim& claim);

struct AllocatedDevice {
  std::string request, driver, pool, device;
  friend bool operator==(const AllocatedDevice&, const AllocatedDevice&) = default;
};
struct ClaimAllocation {
  std::string uid;
  bool allocated = false;
  std::vector<AllocatedDevice> devices;
};
// Reads a live claim's UID and status.allocation (bounded; errors name the field, never echo it).
Result<ClaimAllocation> ClaimAllocationOf(const Json& claim);
// Empty when the allocation is exactly the pinned GPUs of our driver in the node's pool; else
// the reason naming what differs.
std::string AllocationMismatch(const PinnedClaim& claim, const ClaimAllocation& allocation);
// The PCI addresses of our driver's allocated devices (what the firmware check runs on).
std::vector<std::string> AllocatedPciAddresses(const ClaimAllocation& allocation);

}  // namespace tessera::k8s

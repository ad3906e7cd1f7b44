// DRA ResourceClaims for leases: the pinned claim and its allocation.
#include "backends/kubernetes/claims.h"

#include <algorithm>

#include "backends/kubernetes/objects.h"
#include "common/untrusted_text.h"

namespace tessera::k8s {
namespace {

constexpr size_t kMaxResults = 32;  // resource.k8s.io/v1 AllocationResultsMaxSize
constexpr size_t kMaxField = 253;

bool IsHex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

std::string JoinSorted(std::vector<std::string> items) {
  std::sort(items.begin(), items.end());
  std::string out;
  for (const auto& item : items)
    out += (out.empty() ? "" : ",") + item;
  return "[" + out + "]";
}

}  // namespace

Resource ResourceClaims() {
  return {"/apis/resource.k8s.io/v1", "resourceclaims", true};
}

const char* GpuApiName(GpuApi api) {
  return api == GpuApi::kDra ? "dra" : "device-plugin";
}

Result<GpuApi> ParseGpuApi(std::string_view name) {
  if (name == "dra") return GpuApi::kDra;
  if (name == "device-plugin") return GpuApi::kDevicePlugin;
  return InvalidArgument("--k8s-gpu-api " + Excerpt(name, 40) + ": want dra or device-plugin");
}

GpuApi DefaultGpuApi(const Json& api_group_list) {
  if (!api_group_list.is_object()) return GpuApi::kDevicePlugin;
  for (const auto& group : api_group_list.value("groups", Json::array())) {
    if (!group.is_object() || group.value("name", "") != "resource.k8s.io") continue;
    for (const auto& version : group.value("versions", Json::array())) {
      if (version.is_object() && version.value("version", "") == "v1") return GpuApi::kDra;
    }
  }
  return GpuApi::kDevicePlugin;
}

std::string DraDeviceName(std::string_view pci_address) {
  std::string name = "gpu-";
  for (char c : pci_address) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    name += ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) ? c : '-';
  }
  return name;
}

std::string PciAddressOfDraDevice(std::string_view name) {
  // "gpu-" DDDD "-" BB "-" DD "-" F
  if (name.size() != 16 || name.substr(0, 4) != "gpu-") return {};
  std::string_view rest = name.substr(4);
  for (size_t i = 0; i < rest.size(); ++i) {
    bool dash = i == 4 || i == 7 || i == 10;
    if (dash ? rest[i] != '-' : !IsHex(rest[i])) return {};
  }
  std::string pci(rest);
  pci[4] = ':';
  pci[7] = ':';
  pci[10] = '.';
  return pci;
}

std::string PinnedSelector(const std::vector<std::string>& pci_addresses) {
  std::string list;
  for (const auto& pci : pci_addresses)
    list += (list.empty() ? "\"" : ", \"") + pci + "\"";
  return std::string("device.driver == \"") + kDraDriver +
         "\" && device.attributes[\"resource.kubernetes.io\"].pciBusID in [" + list + "]";
}

Json BuildPinnedClaim(const PinnedClaim& claim) {
  Json labels = {{kManagedBy, "tessera"}};
  if (!claim.lease_name.empty()) labels["tessera.dev/lease"] = claim.lease_name;
  Json request = {
      {"name", kClaimRequestName},
      {"exactly",
       {{"deviceClassName", claim.vfio ? kVfioDeviceClass : kGpuDeviceClass},
        {"allocationMode", "ExactCount"},
        {"count", claim.pci_addresses.size()},
        {"selectors",
         Json::array({{{"cel", {{"expression", PinnedSelector(claim.pci_addresses)}}}}})}}}};
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceClaim"},
          {"metadata", {{"name", claim.name}, {"namespace", claim.namespace_}, {"labels", labels}}},
          {"spec", {{"devices", {{"requests", Json::array({request})}}}}}};
}

Result<ClaimAllocation> ClaimAllocationOf(const Json& claim) {
  if (!claim.is_object()) return InvalidArgument("claim: not an object");
  ClaimAllocation out;
  const Json& metadata = claim.value("metadata", Json::object());
  if (!metadata.is_object() || !metadata.value("uid", Json()).is_string())
    return InvalidArgument("claim metadata.uid: missing");
  out.uid = metadata["uid"].get<std::string>();
  if (out.uid.empty() || out.uid.size() > kMaxField)
    return InvalidArgument("claim metadata.uid: empty or too long");
  const Json& status = claim.value("status", Json::object());
  if (!status.is_object()) return InvalidArgument("claim status: not an object");
  auto allocation = status.find("allocation");
  if (allocation == status.end() || allocation->is_null()) return out;
  if (!allocation->is_object()) return InvalidArgument("claim status.allocation: not an object");
  out.allocated = true;
  const Json& devices = allocation->value("devices", Json::object());
  const Json& results = devices.is_object() ? devices.value("results", Json::array()) : Json();
  if (!results.is_array())
    return InvalidArgument("claim status.allocation.devices.results: not a list");
  if (results.size() > kMaxResults)
    return InvalidArgument("claim status.allocation.devices.results: more than " +
                           std::to_string(kMaxResults));
  for (size_t i = 0; i < results.size(); ++i) {
    const Json& result = results[i];
    std::string at = "claim status.allocation.devices.results[" + std::to_string(i) + "]";
    if (!result.is_object()) return InvalidArgument(at + ": not an object");
    AllocatedDevice device;
    for (auto [field, target] :
         {std::pair{"request", &device.request}, std::pair{"driver", &device.driver},
          std::pair{"pool", &device.pool}, std::pair{"device", &device.device}}) {
      const Json& value = result.value(field, Json());
      if (!value.is_string() || value.get_ref<const std::string&>().empty() ||
          value.get_ref<const std::string&>().size() > kMaxField)
        return InvalidArgument(at + "." + field + ": missing, empty or too long");
      *target = value.get<std::string>();
    }
    out.devices.push_back(std::move(device));
  }
  return out;
}

std::string AllocationMismatch(const PinnedClaim& claim, const ClaimAllocation& allocation) {
  if (!allocation.allocated) return "claim " + claim.name + " is not allocated";
  std::vector<std::string> wanted, got;
  for (const auto& pci : claim.pci_addresses)
    wanted.push_back(claim.node + "/" + DraDeviceName(pci));
  for (const auto& device : allocation.devices) {
    std::string entry = device.pool + "/" + device.device;
    if (device.driver != kDraDriver) entry = device.driver + ":" + entry;
    got.push_back(entry);
  }
  std::sort(wanted.begin(), wanted.end());
  std::sort(got.begin(), got.end());
  if (wanted == got) return {};
  return "claim " + claim.name + " was allocated " + Excerpt(JoinSorted(got), 600) +
         " but the lease pins " + JoinSorted(wanted);
}

std::vector<std::string> AllocatedPciAddresses(const ClaimAllocation& allocation) {
  std::vector<std::string> out;
  for (const auto& device : allocation.devices) {
    if (device.driver != kDraDriver) continue;
    std::string pci = PciAddressOfDraDevice(device.device);
    if (!pci.empty()) out.push_back(pci);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace tessera::k8s

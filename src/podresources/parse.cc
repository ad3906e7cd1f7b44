// A ListPodResourcesResponse as plain values, within the bounds of podresources.h.
#include <algorithm>

#include "common/untrusted_text.h"
#include "podresources/podresources.h"
#include "podresources/proto.h"

namespace tessera::podresources {

const PodDevices* PodList::Find(std::string_view namespace_name, std::string_view name) const {
  for (const auto& pod : pods) {
    if (pod.namespace_name == namespace_name && pod.name == name) return &pod;
  }
  return nullptr;
}

namespace {

bool FitsName(const std::string& text) {
  return text.size() <= kMaxNameBytes;
}

// The container's DRA devices into `entry`; oversized ones are left out with a warning.
void AddClaimDevices(const ::v1::ContainerResources& container, PodDevices& entry,
                     std::vector<std::string>& warnings) {
  size_t taken = 0;
  for (const auto& claim : container.dynamic_resources()) {
    for (const auto& resource : claim.claim_resources()) {
      bool bad = !FitsName(claim.claim_name()) || !FitsName(claim.claim_namespace()) ||
                 !FitsName(resource.driver_name()) || !FitsName(resource.pool_name()) ||
                 resource.device_name().empty() || !FitsName(resource.device_name()) ||
                 !FitsName(container.name()) || taken >= kMaxClaimDevicesPerContainer;
      if (bad) {
        warnings.push_back("pod " + entry.namespace_name + "/" + entry.name + " claim " +
                           Excerpt(claim.claim_name(), 60) + ": oversized entry; ignored");
        continue;
      }
      ++taken;
      entry.claim_devices.push_back({container.name(), claim.claim_namespace(), claim.claim_name(),
                                     resource.driver_name(), resource.pool_name(),
                                     resource.device_name()});
    }
  }
}

}  // namespace

PodList FromProto(const ::v1::ListPodResourcesResponse& response) {
  PodList out;
  for (const auto& pod : response.pod_resources()) {
    if (out.pods.size() >= kMaxPods) {
      out.warnings.push_back("more than " + std::to_string(kMaxPods) + " pods; the rest ignored");
      break;
    }
    if (pod.name().empty() || pod.name().size() > kMaxNameBytes || pod.namespace_().empty() ||
        pod.namespace_().size() > kMaxNameBytes) {
      out.warnings.push_back("pod " + Excerpt(pod.namespace_(), 40) + "/" +
                             Excerpt(pod.name(), 40) + ": bad name; ignored");
      continue;
    }
    PodDevices entry{pod.namespace_(), pod.name(), {}, {}};
    for (const auto& container : pod.containers()) {
      AddClaimDevices(container, entry, out.warnings);
      for (const auto& devices : container.devices()) {
        bool bad = devices.resource_name().size() > kMaxNameBytes ||
                   static_cast<size_t>(devices.device_ids_size()) > kMaxIdsPerContainer ||
                   container.name().size() > kMaxNameBytes;
        for (const auto& id : devices.device_ids())
          bad = bad || id.empty() || id.size() > kMaxIdBytes;
        if (bad) {
          out.warnings.push_back("pod " + entry.namespace_name + "/" + entry.name + " resource " +
                                 Excerpt(devices.resource_name(), 60) +
                                 ": oversized entry; ignored");
          continue;
        }
        entry.devices.push_back(
            {container.name(), devices.resource_name(),
             std::vector<std::string>(devices.device_ids().begin(), devices.device_ids().end())});
      }
    }
    out.pods.push_back(std::move(entry));
  }
  return out;
}

Result<PodList> ParseListResponse(std::string_view bytes) {
  if (bytes.size() > kMaxAnswerBytes) {
    return InvalidArgument("PodResources answer of " + std::to_string(bytes.size()) +
                           " bytes is over the limit");
  }
  ::v1::ListPodResourcesResponse response;
  if (!response.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return InvalidArgument("PodResources answer is not a ListPodResourcesResponse");
  }
  return FromProto(response);
}

std::vector<std::string> DeviceIds(const PodDevices& pod, std::string_view resource) {
  std::vector<std::string> ids;
  for (const auto& devices : pod.devices) {
    if (devices.resource == resource) ids.insert(ids.end(), devices.ids.begin(), devices.ids.end());
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

}  // namespace tessera::podresources

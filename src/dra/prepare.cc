// Whether a claim may be prepared on this node, and its per-claim CDI spec. Pure: the claim
// object, this node's devices and their health/lease state in; a decision or a spec out.
#include <algorithm>

#include "dra/dra.h"

namespace tessera::dra {
namespace {

std::string ClaimName(const ClaimRef& ref) {
  return ref.namespace_name + "/" + ref.name;
}

template <typename T, typename Same>
void AppendUnique(std::vector<T>* into, const std::vector<T>& from, Same same) {
  for (const auto& item : from) {
    bool seen = std::any_of(into->begin(), into->end(), [&](const T& x) { return same(x, item); });
    if (!seen) into->push_back(item);
  }
}

}  // namespace

std::string ClaimCdiId(std::string_view uid, std::string_view device) {
  return std::string(kClaimSpecKind) + "=" + std::string(uid) + "-" + std::string(device);
}

std::string ClaimSpecPath(std::string_view cdi_dir, std::string_view uid) {
  // "<vendor>-<class>_<uid>.json", the transient per-claim file name NVIDIA's driver uses.
  return std::string(cdi_dir) + "/gpu.tessera.dev-claim_" + std::string(uid) + ".json";
}

Result<PreparedClaim> PlanPrepare(const ClaimRef& ref, const ResourceClaim& claim,
                                  const PrepareContext& context) {
  if (claim.uid != ref.uid) {
    // The claim was deleted and re-created under the same name: kubelet's claim is gone.
    return FailedPrecondition("claim " + ClaimName(ref) + ": UID is " + claim.uid +
                              ", kubelet asked for " + ref.uid);
  }
  if (!claim.allocated) return FailedPrecondition("claim " + ClaimName(ref) + ": not allocated");
  PreparedClaim prepared;
  prepared.ref = ref;
  for (const auto& result : claim.results) {
    if (result.driver != context.driver || result.pool != context.pool) continue;
    const NodeDevice* device = context.node->Find(result.device);
    if (!device) {
      return FailedPrecondition("claim " + ClaimName(ref) + ": device " + result.device +
                                " is not published by node " + context.pool);
    }
    if (auto why = WhyUnavailable(*device, *context.state, ref.uid); !why.empty()) {
      return FailedPrecondition("claim " + ClaimName(ref) + ": device " + result.device + " (" +
                                device->pci_address + ") is unavailable: " + why);
    }
    auto same =
        std::find_if(prepared.devices.begin(), prepared.devices.end(),
                     [&](const PreparedDevice& d) { return d.device_name == device->name; });
    if (same != prepared.devices.end()) {
      same->request_names.push_back(result.request);
      continue;
    }
    prepared.devices.push_back(PreparedDevice{
        {result.request}, context.pool, device->name, {ClaimCdiId(ref.uid, device->name)}, {}, {}});
  }
  if (prepared.devices.empty()) {
    return FailedPrecondition("claim " + ClaimName(ref) + ": no device of driver " +
                              context.driver + " in pool " + context.pool + " is allocated");
  }
  return prepared;
}

Result<cdi::Spec> BuildClaimSpec(const PreparedClaim& claim, const NodeDevices& node) {
  cdi::Spec spec;
  spec.kind = kClaimSpecKind;
  for (const auto& prepared : claim.devices) {
    const NodeDevice* device = node.Find(prepared.device_name);
    if (!device) return NotFound("device " + prepared.device_name + ": not on this node");
    cdi::ContainerEdits own = device->edits;
    // A MIG instance made at prepare: its parent's node (the device's own) and its GI and CI
    // capability nodes.
    if (prepared.mig_instance) {
      const auto& nodes = prepared.mig_instance->device_nodes;
      own.device_nodes.insert(own.device_nodes.begin(), nodes.begin(), nodes.end());
    }
    spec.devices.push_back(cdi::Device{claim.ref.uid + "-" + device->name, {}, std::move(own)});
    // Shared nodes and driver files once per spec, whatever the mix of modes.
    auto& edits = spec.container_edits;
    const auto& shared = device->shared_edits;
    AppendUnique(&edits.env, shared.env, std::equal_to<>());
    AppendUnique(
        &edits.device_nodes, shared.device_nodes,
        [](const cdi::DeviceNode& a, const cdi::DeviceNode& b) { return a.path == b.path; });
    AppendUnique(&edits.mounts, shared.mounts, [](const cdi::Mount& a, const cdi::Mount& b) {
      return a.container_path == b.container_path;
    });
    AppendUnique(&edits.hooks, shared.hooks, std::equal_to<>());
  }
  spec.version = cdi::MinimumVersion(spec);
  if (auto problems = cdi::ValidateSpec(spec); !problems.empty()) {
    return InvalidArgument("claim " + claim.ref.uid +
                           " CDI spec: " + cdi::FormatProblem(problems.front()));
  }
  return spec;
}

}  // namespace tessera::dra

// The parts of a WDDM/MCDM kubelet device plugin that do not speak gRPC: which resource each
// adapter belongs to, replica IDs, and what Allocate returns.
#include <algorithm>
#include <map>
#include <set>

#include "windows/windows.h"

namespace tessera::windows {
namespace {

constexpr const char* kReplicaSeparator = "::";

}  // namespace

Result<PluginInventory> BuildPluginInventory(const Snapshot& s, int replicas) {
  if (replicas < 1) {
    return InvalidArgument("replicas must be at least 1, got " + std::to_string(replicas));
  }
  PluginResource display{kDisplayResource, {}};
  PluginResource compute{kComputeResource, {}};
  PluginInventory out;
  for (size_t i = 0; i < s.adapters.size(); ++i) {
    const Adapter& a = s.adapters[i];
    std::string label = "adapter " + std::to_string(i) + " (" + a.description + ")";
    std::string path = a.PciLocationPath();
    if (path.empty()) {
      out.skipped.push_back(label + ": no PCI location path");
      continue;
    }
    if (!a.compute) {
      out.skipped.push_back(label + ": no D3D12 core compute support");
      continue;
    }
    PluginResource& target = a.display ? display : compute;
    for (int r = 0; r < replicas; ++r) {
      std::string id = replicas == 1 ? path : path + kReplicaSeparator + std::to_string(r);
      target.devices.push_back({id, static_cast<int>(i), path});
    }
  }
  for (PluginResource* r : {&display, &compute}) {
    if (!r->devices.empty()) out.resources.push_back(std::move(*r));
  }
  return out;
}

Result<PluginAllocation> Allocate(const Snapshot& s, const PluginInventory& inventory,
                                  const std::vector<std::string>& device_ids,
                                  const VendorFiles& vendor_files) {
  std::map<std::string, const PluginDevice*> by_id;
  for (const PluginResource& r : inventory.resources) {
    for (const PluginDevice& d : r.devices)
      by_id[d.id] = &d;
  }
  std::set<int> seen;
  std::vector<const Adapter*> adapters;
  PluginAllocation out;
  for (const std::string& id : device_ids) {
    auto it = by_id.find(id);
    if (it == by_id.end()) return NotFound("device ID \"" + id + "\" is not advertised");
    const PluginDevice& d = *it->second;
    if (d.adapter_index < 0 || static_cast<size_t>(d.adapter_index) >= s.adapters.size()) {
      return Internal("device ID \"" + id + "\" points past the snapshot's adapters");
    }
    if (!seen.insert(d.adapter_index).second) continue;  // another replica of the same adapter
    adapters.push_back(&s.adapters[d.adapter_index]);
    // containerd builds the OCI windows.devices entry (IDType://ID) from host_path alone and
    // requires container_path and permissions to be empty for Windows devices.
    out.devices.push_back({"vpci-location-path://" + d.location_path, "", ""});
  }
  std::sort(adapters.begin(), adapters.end());
  RuntimeFiles files = PlanRuntimeFiles(adapters, vendor_files);
  for (const FileMount& m : files.mounts) {
    out.mounts.push_back({m.destination, m.source, m.read_only});
  }
  out.problems = files.problems;
  return out;
}

}  // namespace tessera::windows

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

Result<PluginInventory> BuildHyperVPluginInventory(const Snapshot& s) {
  if (!s.hyperv_facts) {
    return FailedPrecondition(
        "--windows-isolation hyperv needs a format-2 snapshot (PCI adapters and Hyper-V facts): "
        "write one with tessera-windows-discover.exe");
  }
  PluginResource gpus{kHyperVGpuResource, {}};
  PluginInventory out;
  const auto& adapters = s.hyperv_facts->pci_adapters;
  for (size_t i = 0; i < adapters.size(); ++i) {
    const PciAdapter& a = adapters[i];
    std::string label = "PCI adapter " + std::to_string(i) + " (" + a.description + ")";
    std::string path = a.PciLocationPath();
    if (!a.Dismounted()) {
      out.skipped.push_back(label + ": not dismounted from the host");
      continue;
    }
    if (path.empty()) {
      out.skipped.push_back(label + ": no PCI location path");
      continue;
    }
    gpus.devices.push_back({path, static_cast<int>(i), path});
  }
  if (!gpus.devices.empty()) out.resources.push_back(std::move(gpus));
  return out;
}

Result<PluginAllocation> AllocateHyperV(const Snapshot& s, const PluginInventory& inventory,
                                        const std::vector<std::string>& device_ids) {
  if (device_ids.size() > 1) {
    return InvalidArgument(std::to_string(device_ids.size()) +
                           " devices requested for one "
                           "container: a Hyper-V-isolated container takes one GPU (its pod's MMIO "
                           "gaps are sized for one)");
  }
  PluginAllocation out;
  for (const std::string& id : device_ids) {
    const PluginDevice* found = nullptr;
    for (const PluginResource& r : inventory.resources) {
      for (const PluginDevice& d : r.devices) {
        if (d.id == id) found = &d;
      }
    }
    if (found == nullptr) return NotFound("device ID \"" + id + "\" is not advertised");
    if (!s.hyperv_facts || found->adapter_index < 0 ||
        static_cast<size_t>(found->adapter_index) >= s.hyperv_facts->pci_adapters.size()) {
      return Internal("device ID \"" + id + "\" points past the snapshot's PCI adapters");
    }
    const PciAdapter& a = s.hyperv_facts->pci_adapters[found->adapter_index];
    // containerd turns host_path IDType://ID into the OCI windows.devices entry; hcsshim assigns
    // the device to the utility VM.
    out.devices.push_back({"vpci-instance-id://" + a.instance_id, "", ""});
  }
  return out;
}

}  // namespace tessera::windows

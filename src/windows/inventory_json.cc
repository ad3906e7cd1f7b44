// A Windows snapshot in the inventory JSON shape that `tessera inventory` prints on Linux, so
// tools reading one read the other; the Windows-only details go in a "windows" object.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "windows/text.h"
#include "windows/windows.h"

namespace tessera::windows {
namespace {

using text::Hex;

using ojson = nlohmann::ordered_json;

// Linux kinds: class 0x03xxxx is a GPU, 0x12xxxx a processing accelerator. Without a class
// code, a compute-only (MCDM) adapter is an accelerator and anything that renders is a GPU.
const char* Kind(const Adapter& a) {
  if (a.class_code) return (*a.class_code >> 16) == 0x12 ? "accelerator" : "gpu";
  return a.display ? "gpu" : "accelerator";
}

}  // namespace

std::string InventoryJson(const Snapshot& s, int indent) {
  ojson devices = ojson::array();
  ojson adapters = ojson::array();
  for (size_t i = 0; i < s.adapters.size(); ++i) {
    const Adapter& a = s.adapters[i];
    std::string path = a.PciLocationPath();
    ojson warnings = ojson::array();
    if (path.empty()) warnings.push_back("no PCI location path: it cannot be assigned alone");
    if (a.driver_store_path.empty()) {
      warnings.push_back("no DriverStore path: runtime files cannot be mounted");
    }
    ojson d = ojson::object();
    d["pci_address"] = path.empty() ? ojson(nullptr) : ojson(path);
    d["vendor_id"] = Hex(a.vendor_id, 4);
    d["device_id"] = Hex(a.device_id, 4);
    d["subsystem_vendor_id"] = Hex(a.subsystem_id & 0xffff, 4);
    d["subsystem_device_id"] = Hex(a.subsystem_id >> 16, 4);
    d["class_code"] = a.class_code ? ojson(Hex(*a.class_code, 6)) : ojson(nullptr);
    d["revision"] = Hex(a.revision, 2);
    d["kind"] = Kind(a);
    d["vendor"] = "";
    d["model"] =
        a.description.empty() ? Hex(a.vendor_id, 4) + ":" + Hex(a.device_id, 4) : a.description;
    d["driver"] = a.driver_service.empty() ? ojson(nullptr) : ojson(a.driver_service);
    d["iommu_group"] = nullptr;
    d["numa_node"] = -1;
    d["bars"] = ojson::array();
    d["link"] = nullptr;
    d["upstream_bridges"] = ojson::array();
    d["device_nodes"] = ojson::array();
    d["gpu_uuid"] = nullptr;
    d["nvidia_minor"] = nullptr;
    d["warnings"] = warnings;
    devices.push_back(d);

    ojson w = ojson::object();
    w["index"] = i;
    w["luid"] = FormatLuid(a.luid);
    w["instance_id"] = a.instance_id;
    w["location_paths"] = a.location_paths;
    w["driver_key"] = a.driver_key;
    w["driver_store_path"] = a.driver_store_path;
    w["driver_version"] = a.driver_version;
    w["integrated"] = a.integrated;
    w["detachable"] = a.detachable;
    w["display"] = a.display;
    w["compute"] = a.compute;
    w["device_string"] = path.empty() ? ojson(nullptr) : ojson("vpci-location-path://" + path);
    w["copy_to_vm_values"] = a.copy_to_vm.size();
    adapters.push_back(w);
  }
  ojson versions = ojson::array();
  for (SchemaVersion v : s.hcs_schema_versions)
    versions.push_back(FormatSchemaVersion(v));
  ojson out = ojson::object();
  out["schema_version"] = 1;  // the Linux inventory schema this shape follows
  out["root"] = nullptr;      // no host root: the data comes from a snapshot
  out["devices"] = devices;
  out["iommu_groups"] = ojson::object();
  out["shared_device_nodes"] = ojson::array();
  out["nvidia_driver"] = nullptr;
  out["warnings"] = ojson::array();
  out["windows"] = ojson{{"hostname", s.hostname},
                         {"product_name", s.os.product_name},
                         {"build", s.os.build},
                         {"ubr", s.os.ubr},
                         {"hcs_schema_versions", versions},
                         {"hcs_schema_source", s.hcs_schema_source},
                         {"adapters", adapters}};
  return out.dump(indent, ' ', false, ojson::error_handler_t::replace) + "\n";
}

}  // namespace tessera::windows

// Resources from an inventory: naming, CDI names, replicas, choosers (precomputed once per
// inventory, not per call), and health state.
#include <fnmatch.h>

#include <algorithm>
#include <cstdio>
#include <tuple>

#include "common/untrusted_text.h"
#include "deviceplugin/deviceplugin.h"
#include "deviceplugin/mig_resources.h"
#include "mps/mps.h"
#include "sharing/sharing.h"

namespace tessera::deviceplugin {
namespace {

using inventory::DeviceKind;
using inventory::PciDevice;

bool IsGpuLike(const PciDevice& device) {
  return device.kind == DeviceKind::kGpu || device.kind == DeviceKind::kAccelerator;
}

// Devices are only handed out when a driver the plugin knows how to expose owns them.
bool UsableDriver(const std::string& driver) {
  return driver == "nvidia" || driver == "vfio-pci" || driver == "amdgpu" || driver == "i915" ||
         driver == "xe";
}

std::string DefaultResource(const PciDevice& device) {
  if (device.kind == DeviceKind::kNvSwitch) {
    // NVSwitches are handed out only to VM service partitions (vfio); under the nvidia driver
    // the host's fabric manager owns them.
    return device.driver == "vfio-pci" ? "nvidia.com/nvswitch" : "";
  }
  if (!IsGpuLike(device)) return "";
  if (device.driver == "nvidia") return "nvidia.com/gpu";
  if (device.driver == "vfio-pci") return device.is_nvidia() ? "nvidia.com/pgpu" : "";
  if (device.driver == "amdgpu") return "amd.com/gpu";
  if (device.driver == "i915") return "gpu.intel.com/i915";
  if (device.driver == "xe") return "gpu.intel.com/xe";
  return "";
}

std::string SanitizedModel(const std::string& model) {
  std::string out;
  bool gap = false;
  for (char c : model) {
    bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!alnum) {
      gap = !out.empty();
      continue;
    }
    if (gap) out += '_';
    gap = false;
    out += c;
  }
  return out.empty() ? "unknown" : out;
}

bool Matches(const NamingRule& rule, const PciDevice& device) {
  if (rule.kind.empty()) {
    if (!IsGpuLike(device)) return false;
  } else if (rule.kind != inventory::DeviceKindName(device.kind)) {
    return false;
  }
  if (rule.vendor_id && *rule.vendor_id != device.vendor_id) return false;
  if (rule.device_id && *rule.device_id != device.device_id) return false;
  if (!rule.driver.empty() && rule.driver != device.driver) return false;
  if (!rule.model.empty() && ::fnmatch(rule.model.c_str(), device.model.c_str(), 0) != 0) {
    return false;
  }
  return true;
}

uint64_t Fnv1a(std::string_view text) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

bool HasOption(const std::vector<std::string>& options, const char* option) {
  return std::find(options.begin(), options.end(), option) != options.end();
}

// The first matching naming rule's resource ("{model}" filled in), else the default one; ""
// when the device is not advertised.
std::string ResourceNameFor(const std::vector<NamingRule>& rules, const PciDevice& device) {
  std::string name;
  for (const auto& rule : rules) {
    if (Matches(rule, device)) {
      name = rule.name;
      if (size_t at = name.find("{model}"); at != std::string::npos) {
        name.replace(at, 7, SanitizedModel(device.model));
      }
      break;
    }
  }
  if (name.empty()) name = DefaultResource(device);
  return name;
}

// A whole device as advertised: its ID, what its health watches and its name in the CDI specs.
PhysicalDevice PhysicalDeviceFor(const inventory::Inventory& inventory, const PciDevice& device,
                                 const std::vector<cdi::Spec>& cdi_specs) {
  PhysicalDevice physical;
  physical.pci_address = device.pci_address;
  physical.uuid = device.gpu_uuid;
  physical.id =
      device.gpu_uuid && !device.gpu_uuid->empty() ? *device.gpu_uuid : device.pci_address;
  physical.numa_node = device.numa_node;
  physical.model = device.model;
  physical.vendor_id = device.vendor_id;
  physical.driver = device.driver;
  physical.watch_paths.push_back(
      inventory::HostPath(inventory.root, "/sys/bus/pci/devices/" + device.pci_address));
  for (const auto& node : device.device_nodes) {
    if (node.exists) physical.watch_paths.push_back(inventory::HostPath(inventory.root, node.path));
  }
  // The CDI builder names a device by its stable ID, or by its IOMMU group when VFIO must hand
  // out a group with several members.
  std::vector<std::string> cdi_names = {physical.id};
  if (device.iommu_group) cdi_names.push_back("iommu-group-" + std::to_string(*device.iommu_group));
  for (const auto& spec : cdi_specs) {
    for (const auto& cdi_device : spec.devices) {
      if (std::find(cdi_names.begin(), cdi_names.end(), cdi_device.name) == cdi_names.end()) {
        continue;
      }
      if (!physical.cdi_name.empty()) continue;
      physical.cdi_name = spec.kind + "=" + cdi_device.name;
      physical.cdi_kind = spec.kind;
      physical.edits = cdi_device.container_edits;
    }
  }
  return physical;
}

// The time-slicing and MPS sharing entries for the resource `name`: replicas, MPS and the name
// it is advertised under.
Status ApplySharing(const Config& config, const std::string& name, Resource& resource) {
  for (const auto& [shared_list, mps, rename_by_default] :
       {std::tuple{&config.sharing.resources, false, config.sharing.rename_by_default},
        std::tuple{&config.sharing.mps.resources, true, config.sharing.mps.rename_by_default}}) {
    for (const auto& shared : *shared_list) {
      if (shared.name != name) continue;
      resource.replicas = shared.replicas;
      resource.mps = mps;
      // An MPS container takes one replica: one process reaches one daemon, and two replicas
      // would only double a per-process limit.
      resource.fail_requests_greater_than_one =
          mps || config.sharing.fail_requests_greater_than_one;
      if (!shared.rename.empty()) {
        resource.name = shared.rename;
      } else if (rename_by_default) {
        resource.name = name + ".shared";
        if (auto problem = CheckResourceName(resource.name); !problem.empty()) {
          return InvalidArgument("sharing: renamed resource " + problem);
        }
      }
    }
  }
  return Ok();
}

// MPS shares whole NVIDIA GPUs that have a UUID; each gets the resource's replicas.
Status MarkMpsDevices(const std::string& name, const Resource& resource,
                      std::vector<PhysicalDevice>& devices) {
  for (int index : resource.devices) {
    PhysicalDevice& device = devices[index];
    if (device.mig)
      return InvalidArgument("sharing.mps: " + name +
                             ": sharing using MPS is not supported for MIG devices (" + device.id +
                             "); share MIG slices by MIG, or whole GPUs by MPS");
    if (!device.uuid || device.vendor_id != 0x10de)
      return InvalidArgument("sharing.mps: " + name + ": " + device.pci_address +
                             " is not an NVIDIA GPU with a UUID; MPS needs one");
    device.mps_replicas = resource.replicas;
  }
  return Ok();
}

// The spec-level edits of the devices' CDI kinds, and the advertised IDs ("<id>::<n>" for each
// replica).
void ListResourceIds(Resource& resource, const std::vector<PhysicalDevice>& devices,
                     const std::vector<cdi::Spec>& cdi_specs) {
  for (int index : resource.devices) {
    const PhysicalDevice& device = devices[index];
    if (!device.cdi_kind.empty() && !resource.spec_edits.count(device.cdi_kind)) {
      for (const auto& spec : cdi_specs) {
        if (spec.kind == device.cdi_kind) resource.spec_edits[spec.kind] = spec.container_edits;
      }
    }
    if (resource.replicas == 1) {
      resource.ids.push_back(device.id);
      resource.device_of_id[device.id] = index;
    } else {
      for (int n = 0; n < resource.replicas; ++n) {
        std::string id = device.id + "::" + std::to_string(n);
        resource.ids.push_back(id);
        resource.device_of_id[id] = index;
      }
    }
  }
}

// Topology-aware choice for whole devices, precomputed once; the partition table only when it
// maps exactly the resource's GPUs. (MIG slices share their parent's links: there is no topology
// to score among them.)
void AttachChooser(Resource& resource, const std::vector<PhysicalDevice>& devices,
                   const inventory::Inventory& inventory,
                   const std::optional<topology::PartitionTable>& table,
                   std::vector<std::string>& warnings) {
  bool mig_resource = std::any_of(resource.devices.begin(), resource.devices.end(),
                                  [&](int i) { return devices[i].mig; });
  if (resource.replicas != 1 || mig_resource ||
      resource.devices.size() > static_cast<size_t>(topology::kMaxGpus)) {
    return;
  }
  topology::GpuTopology gpus;
  std::set<std::string> pcis;
  for (int index : resource.devices) {
    const PhysicalDevice& device = devices[index];
    const PciDevice* source = inventory.FindDevice(device.pci_address);
    topology::GpuInfo info;
    info.id = device.id;
    info.pci_address = device.pci_address;
    info.numa_node = device.numa_node;
    if (source) info.upstream_bridges = source->upstream_bridges;
    gpus.gpus.push_back(std::move(info));
    pcis.insert(device.pci_address);
  }
  std::optional<topology::PartitionTable> resource_table;
  if (table) {
    std::set<std::string> table_pcis;
    for (const auto& [module, pci] : table->pci_addresses)
      table_pcis.insert(pci);
    if (table_pcis == pcis) {
      resource_table = *table;
    } else {
      resource.chooser_note = "partition table " + table->board +
                              " does not map exactly the GPUs of " + resource.name +
                              "; scoring links instead";
    }
  }
  auto chooser = topology::GpuChooser::Create(std::move(gpus), resource_table);
  if (chooser) {
    resource.chooser.emplace(std::move(*chooser));
  } else {
    resource.chooser_note = chooser.error().message;
  }
  if (!resource.chooser_note.empty()) {
    warnings.push_back(resource.name + ": " + resource.chooser_note);
  }
}

// The CDI names of the devices (cdi-cri) and their annotation (cdi-annotations).
Status AddCdiNames(ContainerAllocation& out, const Resource& resource,
                   const std::vector<int>& physical, const std::vector<PhysicalDevice>& devices,
                   const Config& config) {
  const auto& strategies = config.device_list_strategy;
  auto wants = [&](ListStrategy s) {
    return std::find(strategies.begin(), strategies.end(), s) != strategies.end();
  };
  std::vector<std::string> names;
  for (int index : physical) {
    const auto& device = devices[index];
    if (device.cdi_name.empty()) {
      return FailedPrecondition("device \"" + device.id + "\" has no CDI device (see warnings)");
    }
    // Several members of one VFIO group share one CDI device.
    if (std::find(names.begin(), names.end(), device.cdi_name) == names.end()) {
      names.push_back(device.cdi_name);
    }
  }
  if (wants(ListStrategy::kCdiCri)) out.cdi_devices = names;
  if (wants(ListStrategy::kCdiAnnotations)) {
    std::string joined;
    for (const auto& name : names)
      joined += (joined.empty() ? "" : ",") + name;
    char hash[17];
    std::snprintf(hash, sizeof hash, "%016llx",
                  static_cast<unsigned long long>(Fnv1a(resource.name + "|" + joined)));
    out.annotations["cdi.k8s.io/" + config.annotation_plugin + "_" + hash] = joined;
  }
  return Ok();
}

// CDI container edits as device-specs output: device nodes and mounts once per container path.
void AddContainerEdits(ContainerAllocation& out, const cdi::ContainerEdits& edits) {
  for (const auto& node : edits.device_nodes) {
    std::string host = node.host_path.empty() ? node.path : node.host_path;
    bool seen_node =
        std::any_of(out.devices.begin(), out.devices.end(),
                    [&](const DeviceSpecOut& d) { return d.container_path == node.path; });
    if (!seen_node)
      out.devices.push_back({node.path, host, node.permissions.empty() ? "rw" : node.permissions});
  }
  for (const auto& mount : edits.mounts) {
    bool seen = std::any_of(out.mounts.begin(), out.mounts.end(), [&](const MountOut& m) {
      return m.container_path == mount.container_path;
    });
    if (!seen) {
      out.mounts.push_back({mount.container_path, mount.host_path, HasOption(mount.options, "ro")});
    }
  }
  for (const auto& env : edits.env) {
    size_t eq = env.find('=');
    if (eq != std::string::npos) out.envs[env.substr(0, eq)] = env.substr(eq + 1);
  }
}

// device-specs: each device's own edits, then the spec-level edits of their CDI kinds.
void AddDeviceSpecs(ContainerAllocation& out, const Resource& resource,
                    const std::vector<int>& physical, const std::vector<PhysicalDevice>& devices) {
  std::vector<std::string> kinds;
  for (int index : physical) {
    AddContainerEdits(out, devices[index].edits);
    const auto& kind = devices[index].cdi_kind;
    if (!kind.empty() && std::find(kinds.begin(), kinds.end(), kind) == kinds.end()) {
      kinds.push_back(kind);
    }
  }
  for (const auto& kind : kinds) {
    auto it = resource.spec_edits.find(kind);
    if (it != resource.spec_edits.end()) AddContainerEdits(out, it->second);
  }
}

// envvar: NVIDIA_VISIBLE_DEVICES of the NVIDIA devices.
void AddVisibleDevices(ContainerAllocation& out, const std::vector<int>& physical,
                       const std::vector<PhysicalDevice>& devices) {
  std::string visible;
  for (int index : physical) {
    if (devices[index].vendor_id != 0x10de) continue;
    visible += (visible.empty() ? "" : ",") + devices[index].id;
  }
  if (!visible.empty()) out.envs["NVIDIA_VISIBLE_DEVICES"] = visible;
}

// MPS: the daemon's pipe and private shm, and this client's own limits (its replica's share).
Status AddMpsClient(ContainerAllocation& out, const std::string& mps_root, const std::string& uuid,
                    const MpsLimits& limits) {
  auto paths = mps::PathsFor(mps_root, uuid);
  if (!paths) return paths.error();
  const auto edits = sharing::MpsClientEdits(
      {limits.pinned_memory_bytes, limits.active_thread_percentage, sharing::Mode::kMps, ""},
      paths->pipe, paths->shm);
  for (const auto& [key, value] : edits.env)
    out.envs[key] = value;
  for (const auto& mount : edits.mounts)
    out.mounts.push_back({mount.container_path, mount.host_path, mount.read_only});
  return Ok();
}

}  // namespace

std::string ResourceSocketName(std::string_view resource) {
  std::string out = "tessera-";
  for (char c : resource)
    out += (c == '/' || c == '.') ? '-' : c;
  return out + ".sock";
}

std::string DeviceHealth::Describe() const {
  std::vector<std::string> why;
  if (!present) why.push_back("its sysfs entry or device node is gone");
  if (!fault.empty()) why.push_back(Excerpt(fault, 300));
  if (lease) {
    std::string text = std::string("lease state ") + LeaseStateName(lease->state);
    if (!lease->reason.empty()) text += " (" + Excerpt(lease->reason, 200) + ")";
    why.push_back(text);
  }
  if (!mps_fault.empty()) why.push_back(mps_fault);
  if (why.empty()) return "healthy";
  std::string out;
  for (const auto& w : why)
    out += (out.empty() ? "" : "; ") + w;
  return out;
}

Result<std::unique_ptr<ResourceManager>> ResourceManager::Create(
    const inventory::Inventory& inventory, const Config& config,
    const std::optional<topology::PartitionTable>& table) {
  if (auto s = ValidateConfig(config); !s) return s.error();
  std::unique_ptr<ResourceManager> manager(new ResourceManager());
  manager->config_ = config;

  // CDI names come from the same builder `tessera cdi generate` uses, so the names kubelet
  // passes to the runtime exist in the specs on disk.
  cdi::BuildOptions cdi_options;
  cdi_options.mode = cdi::Mode::kAuto;
  auto built = cdi::BuildSpecs(inventory, cdi_options);
  if (built) {
    manager->cdi_specs_ = built->specs;
  } else {
    manager->warnings_.push_back("CDI specs: " + built.error().message);
  }

  auto mig = PlanMigDevices(inventory, config.mig_strategy);
  if (!mig) return mig.error();

  std::map<std::string, std::vector<int>> by_resource;
  for (const PciDevice& device : inventory.devices) {
    if (!UsableDriver(device.driver)) continue;
    if (mig->replaced_gpus.count(device.pci_address)) continue;  // advertised as its MIG devices
    std::string name = ResourceNameFor(config.resources, device);
    if (name.empty()) continue;
    if (auto problem = CheckResourceName(name); !problem.empty()) {
      return InvalidArgument(device.pci_address + ": resource name " + problem);
    }
    PhysicalDevice physical = PhysicalDeviceFor(inventory, device, manager->cdi_specs_);
    if (physical.cdi_name.empty()) {
      manager->warnings_.push_back(device.pci_address + ": no CDI device in the generated specs");
    }
    by_resource[name].push_back(static_cast<int>(manager->devices_.size()));
    manager->devices_.push_back(std::move(physical));
  }
  for (const MigPlan::Device& entry : mig->devices) {
    by_resource[entry.resource].push_back(static_cast<int>(manager->devices_.size()));
    manager->devices_.push_back(
        MigPhysicalDevice(inventory, entry, manager->cdi_specs_, manager->warnings_));
  }

  std::set<std::string> advertised;
  for (auto& [name, devices] : by_resource) {
    Resource resource;
    resource.name = name;
    resource.devices = devices;
    if (auto s = ApplySharing(config, name, resource); !s) return s.error();
    if (resource.mps) {
      if (auto s = MarkMpsDevices(name, resource, manager->devices_); !s) return s.error();
    }
    if (!advertised.insert(resource.name).second) {
      return InvalidArgument("resource " + resource.name + " would be advertised twice");
    }
    ListResourceIds(resource, manager->devices_, manager->cdi_specs_);
    resource.socket_name = ResourceSocketName(resource.name);
    AttachChooser(resource, manager->devices_, inventory, table, manager->warnings_);
    manager->resources_.push_back(std::move(resource));
  }
  std::sort(manager->resources_.begin(), manager->resources_.end(),
            [](const Resource& a, const Resource& b) { return a.name < b.name; });

  manager->present_.assign(manager->devices_.size(), true);
  manager->fault_.assign(manager->devices_.size(), "");
  manager->lease_.assign(manager->devices_.size(), std::nullopt);
  manager->mps_limits_.assign(manager->devices_.size(), std::nullopt);
  manager->mps_marker_.assign(manager->devices_.size(), "");
  manager->mps_fault_.assign(manager->devices_.size(), "");
  return manager;
}

const Resource* ResourceManager::FindResource(std::string_view name) const {
  for (const auto& resource : resources_) {
    if (resource.name == name) return &resource;
  }
  return nullptr;
}

void ResourceManager::BumpLocked() {
  ++generation_;
  changed_.notify_all();
}

bool ResourceManager::HealthyLocked(int device) const {
  return present_[device] && fault_[device].empty() && !lease_[device] &&
         MpsFaultLocked(device).empty();
}

std::string ResourceManager::MpsFaultLocked(int device) const {
  if (devices_[device].mps_replicas == 0) return "";
  if (!mps_fault_[device].empty()) return "MPS daemon: " + mps_fault_[device];
  if (!mps_limits_[device]) return "its MPS daemon is not set up yet";
  if (mps_marker_[device] != mps_limits_[device]->config_hash)
    return "its MPS daemon is not ready under the current config";
  return "";
}

DeviceHealth ResourceManager::Health(int device) const {
  std::lock_guard lock(mutex_);
  DeviceHealth health;
  health.present = present_[device];
  health.fault = fault_[device];
  health.lease = lease_[device];
  health.mps_fault = MpsFaultLocked(device);
  return health;
}

bool ResourceManager::SetMpsLimits(int device, const MpsLimits& limits) {
  std::lock_guard lock(mutex_);
  if (device < 0 || static_cast<size_t>(device) >= devices_.size() ||
      devices_[device].mps_replicas == 0 || mps_limits_[device] == limits)
    return false;
  mps_limits_[device] = limits;
  BumpLocked();
  return true;
}

bool ResourceManager::SetMpsState(int device, const std::string& marker_hash,
                                  const std::string& fault) {
  std::lock_guard lock(mutex_);
  if (device < 0 || static_cast<size_t>(device) >= devices_.size() ||
      devices_[device].mps_replicas == 0)
    return false;
  const bool was = MpsFaultLocked(device).empty();
  const bool marker_changed = mps_marker_[device] != marker_hash;
  mps_marker_[device] = marker_hash;
  mps_fault_[device] = fault;
  if (marker_changed || was != MpsFaultLocked(device).empty()) {
    BumpLocked();
    return true;
  }
  return false;
}

bool ResourceManager::SetPresence(const std::map<std::string, bool>& present_by_pci) {
  std::lock_guard lock(mutex_);
  bool changed = false;
  for (size_t i = 0; i < devices_.size(); ++i) {
    auto it = present_by_pci.find(PresenceKey(devices_[i]));
    if (it == present_by_pci.end() || present_[i] == it->second) continue;
    // A GPU fault outlives the device's absence: only a verified recovery clears it.
    present_[i] = it->second;
    changed = true;
  }
  if (changed) BumpLocked();
  return changed;
}

bool ResourceManager::SetLeases(const LeaseMap& leases) {
  std::lock_guard lock(mutex_);
  bool changed = false;
  for (size_t i = 0; i < devices_.size(); ++i) {
    std::optional<Lease> blocking;
    auto it = leases.find(devices_[i].pci_address);
    if (it != leases.end() && it->second.blocks_allocation()) blocking = it->second;
    if (blocking != lease_[i]) {
      lease_[i] = std::move(blocking);
      changed = true;
    }
  }
  if (changed) BumpLocked();
  return changed;
}

std::vector<AdvertisedDevice> ResourceManager::List(const Resource& resource,
                                                    uint64_t* generation) const {
  std::lock_guard lock(mutex_);
  if (generation) *generation = generation_;
  std::vector<AdvertisedDevice> out;
  out.reserve(resource.ids.size());
  for (const auto& id : resource.ids) {
    int index = resource.device_of_id.at(id);
    out.push_back({id, HealthyLocked(index), devices_[index].numa_node});
  }
  return out;
}

uint64_t ResourceManager::WaitForChange(uint64_t seen,
                                        std::chrono::steady_clock::time_point deadline) const {
  std::unique_lock lock(mutex_);
  changed_.wait_until(lock, deadline, [&] { return generation_ != seen || shut_down_; });
  return generation_;
}

void ResourceManager::Shutdown() {
  std::lock_guard lock(mutex_);
  shut_down_ = true;
  changed_.notify_all();
}

bool ResourceManager::shut_down() const {
  std::lock_guard lock(mutex_);
  return shut_down_;
}

// ---- Allocate ----

Result<std::vector<ContainerAllocation>> ResourceManager::Allocate(
    const Resource& resource, const std::vector<std::vector<std::string>>& requests) const {
  std::vector<ContainerAllocation> out;
  out.reserve(requests.size());
  for (const auto& ids : requests) {
    auto allocation = AllocateOne(resource, ids);
    if (!allocation) return allocation.error();
    out.push_back(std::move(*allocation));
  }
  return out;
}

Result<ContainerAllocation> ResourceManager::AllocateOne(
    const Resource& resource, const std::vector<std::string>& ids) const {
  if (resource.replicas > 1 && resource.fail_requests_greater_than_one && ids.size() > 1) {
    return InvalidArgument(
        "request for " + std::to_string(ids.size()) + " replicas of " + resource.name +
        (resource.mps ? ": an MPS container takes one replica"
                      : ": sharing.timeSlicing.failRequestsGreaterThanOne allows 1"));
  }
  // Physical devices in request order; replicas of one device count once.
  std::vector<int> physical;
  std::vector<MpsLimits> mps_limits;  // per physical device, for MPS resources
  {
    std::unique_lock lock(mutex_);
    for (const auto& id : ids) {
      auto it = resource.device_of_id.find(id);
      if (it == resource.device_of_id.end()) {
        return InvalidArgument("device \"" + Excerpt(id) + "\" is not a device of " +
                               resource.name);
      }
      int index = it->second;
      if (resource.mps) {
        // No answer before the GPU's daemon is ready under the current config: kubelet would
        // start the container with no limits at all (NVIDIA's plugin, #1946 and #2055).
        const auto deadline = std::chrono::steady_clock::now() +
                              std::chrono::milliseconds(config_.sharing.mps.ready_timeout_ms);
        changed_.wait_until(lock, deadline, [&] {
          return shut_down_ || !present_[index] || !fault_[index].empty() || lease_[index] ||
                 MpsFaultLocked(index).empty();
        });
      }
      if (!HealthyLocked(index)) {
        DeviceHealth health{present_[index], fault_[index], lease_[index], MpsFaultLocked(index)};
        if (resource.mps && health.present && health.fault.empty() && !health.lease)
          return Unavailable("device \"" + Excerpt(id) + "\": " + health.Describe());
        return InvalidArgument("device \"" + Excerpt(id) + "\" is unhealthy: " + health.Describe());
      }
      if (std::find(physical.begin(), physical.end(), index) == physical.end()) {
        physical.push_back(index);
        if (resource.mps) mps_limits.push_back(*mps_limits_[index]);
      }
    }
  }
  if (resource.mps && physical.size() > 1) {
    // One process reaches one MPS daemon (one CUDA_MPS_PIPE_DIRECTORY).
    return InvalidArgument("request for replicas of " + std::to_string(physical.size()) +
                           " GPUs of " + resource.name + ": an MPS container takes one GPU");
  }

  if (windows_) return AllocateWindows(ids);

  ContainerAllocation out;
  const auto& strategies = config_.device_list_strategy;
  auto wants = [&](ListStrategy s) {
    return std::find(strategies.begin(), strategies.end(), s) != strategies.end();
  };
  if (wants(ListStrategy::kCdiCri) || wants(ListStrategy::kCdiAnnotations)) {
    if (auto s = AddCdiNames(out, resource, physical, devices_, config_); !s) return s.error();
  }
  if (wants(ListStrategy::kDeviceSpecs)) AddDeviceSpecs(out, resource, physical, devices_);
  if (wants(ListStrategy::kEnvvar)) AddVisibleDevices(out, physical, devices_);
  if (resource.mps) {
    auto added =
        AddMpsClient(out, config_.sharing.mps.root, *devices_[physical[0]].uuid, mps_limits[0]);
    if (!added) return added.error();
  }
  return out;
}

// ---- GetPreferredAllocation ----

Result<std::vector<std::string>> ResourceManager::Preferred(const Resource& resource,
                                                            const PreferredRequest& request) const {
  for (const auto* list : {&request.available, &request.must_include}) {
    for (const auto& id : *list) {
      if (!resource.device_of_id.count(id)) {
        return InvalidArgument("device \"" + Excerpt(id) + "\" is not a device of " +
                               resource.name);
      }
    }
  }
  if (request.size < 0 || static_cast<size_t>(request.size) > request.available.size()) {
    return InvalidArgument("allocation size " + std::to_string(request.size) + " but " +
                           std::to_string(request.available.size()) + " devices available");
  }
  if (static_cast<size_t>(request.size) < request.must_include.size()) {
    return InvalidArgument("allocation size " + std::to_string(request.size) +
                           " is less than the " + std::to_string(request.must_include.size()) +
                           " devices that must be included");
  }
  if (resource.replicas > 1) return PreferReplicas(resource, request);
  if (resource.chooser) {
    auto chosen = resource.chooser->Choose(request.available, request.must_include, request.size);
    if (chosen) return *chosen;
    // No whole fabric partition fits (or the size is one no partition has): fall back to the
    // best-linked set, so kubelet still gets a topology-aware answer.
    if (resource.chooser->partition_mode()) {
      const auto& scorer = resource.chooser->scorer();
      std::map<std::string, int> index;
      for (int i = 0; i < scorer.gpu_count(); ++i)
        index[scorer.topology().gpus[i].id] = i;
      topology::GpuMask available = 0, must = 0;
      for (const auto& id : request.available)
        available |= topology::GpuMask{1} << index.at(id);
      for (const auto& id : request.must_include)
        must |= topology::GpuMask{1} << index.at(id);
      auto mask = scorer.Choose(available, request.size, must);
      if (mask) {
        std::vector<std::string> out;
        for (int i : topology::MaskToIndices(*mask))
          out.push_back(scorer.topology().gpus[i].id);
        return out;
      }
    }
  }
  // No topology: must_include first, then in advertised order.
  std::vector<std::string> out = request.must_include;
  for (const auto& id : request.available) {
    if (static_cast<int>(out.size()) >= request.size) break;
    if (std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
  }
  return out;
}

std::vector<std::string> ResourceManager::PreferReplicas(const Resource& resource,
                                                         const PreferredRequest& request) const {
  // Free replicas per physical device, in ID order; replicas missing from `available` are in use
  // (or unhealthy), which is what distributed/packed weigh.
  std::map<int, std::vector<std::string>> free;
  for (const auto& id : request.available)
    free[resource.device_of_id.at(id)].push_back(id);
  std::map<int, int> used;
  for (const auto& [device, ids] : free)
    used[device] = resource.replicas - static_cast<int>(ids.size());

  std::vector<std::string> out;
  auto take = [&](std::string id) {  // by value: it may alias an element erased below
    int device = resource.device_of_id.at(id);
    auto& ids = free[device];
    auto it = std::find(ids.begin(), ids.end(), id);
    if (it == ids.end()) return;
    ids.erase(it);
    ++used[device];
    out.push_back(id);
  };
  for (const auto& id : request.must_include)
    take(id);
  while (static_cast<int>(out.size()) < request.size) {
    int best = -1;
    for (const auto& [device, ids] : free) {
      if (ids.empty()) continue;
      if (best < 0) {
        best = device;
        continue;
      }
      bool better = config_.allocation_policy == AllocationPolicy::kDistributed
                        ? used[device] < used[best]
                        : used[device] > used[best];
      if (better) best = device;
    }
    if (best < 0) break;
    take(free[best].front());
  }
  return out;
}

}  // namespace tessera::deviceplugin

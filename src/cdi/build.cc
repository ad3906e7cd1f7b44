// Builds CDI specs from an Inventory: one spec per kind, a CDI device per GPU (or per IOMMU
// group in vfio mode) named by index and by a stable ID, and an `all` device.
#include <algorithm>
#include <optional>
#include <set>

#include "cdi/cdi.h"

namespace tessera::cdi {
namespace {

using inventory::DeviceKind;
using inventory::Inventory;
using inventory::PciDevice;

// Options that read-only driver files get inside the container (nvidia-ctk uses the same).
const std::vector<std::string> kReadOnlyBind = {"ro", "nosuid", "nodev", "bind"};

// A CDI device before naming is final: the names it answers to and its edits.
struct Unit {
  std::vector<std::string> names;
  ContainerEdits edits;
};

struct Builder {
  const Inventory& inventory;
  const BuildOptions& options;
  std::vector<std::string>* warnings;

  DeviceNode Node(const inventory::DeviceNode& node) const {
    DeviceNode out;
    out.path = node.path;
    std::string host = inventory::HostPath(inventory.root, node.path);
    if (host != node.path) out.host_path = host;
    out.type = std::string(1, node.type);
    out.major = node.major;
    out.minor = node.minor;
    return out;
  }

  Mount ReadOnlyMount(const std::string& host_file, const std::string& container_path) const {
    return Mount{inventory::HostPath(inventory.root, host_file), container_path, kReadOnlyBind, ""};
  }

  // The stable name of a device: the GPU UUID when the driver reported one, else the PCI
  // address (':' and '.' are valid in CDI device names).
  static std::string StableName(const PciDevice& device) {
    if (device.gpu_uuid && !device.gpu_uuid->empty()) return *device.gpu_uuid;
    return device.pci_address;
  }

  const inventory::SharedDeviceNode* Shared(const std::string& role) const {
    for (const auto& shared : inventory.shared_device_nodes) {
      if (shared.role == role) return &shared;
    }
    return nullptr;
  }

  // Each MIG device of `gpu` (PCI index `index`), named as nvidia-ctk names it: "<gpu>:<mig>"
  // and "MIG-<uuid>". A container needs the parent's nodes plus the GPU instance's and the
  // compute instance's nvidia-cap nodes.
  void AddMigUnits(const PciDevice& gpu, size_t index, const std::vector<DeviceNode>& parent_nodes,
                   const std::string& kind, std::vector<Unit>& units) {
    if (!gpu.mig || gpu.mig->enabled == false) return;
    for (const inventory::MigDevice& mig : gpu.mig->devices) {
      std::string name = std::to_string(index) + ":" + std::to_string(mig.index);
      const auto& gi = mig.gpu_instance_node;
      const auto& ci = mig.compute_instance_node;
      if (!gi || !ci || !gi->exists || !ci->exists) {
        warnings->push_back(gpu.pci_address + " MIG GI " + std::to_string(mig.gpu_instance_id) +
                            " CI " + std::to_string(mig.compute_instance_id) +
                            ": capability device nodes not present; " + name + " left out of " +
                            kind);
        continue;
      }
      Unit unit;
      unit.edits.device_nodes = parent_nodes;
      unit.edits.device_nodes.push_back(Node(*gi));
      unit.edits.device_nodes.push_back(Node(*ci));
      unit.names = {name};
      if (!mig.uuid.empty()) unit.names.push_back(mig.uuid);
      units.push_back(std::move(unit));
    }
  }

  // ---- driver mode ----
  Spec Driver(const std::vector<const PciDevice*>& gpus, const std::string& kind) {
    std::vector<Unit> units;
    for (size_t i = 0; i < gpus.size(); ++i) {
      const PciDevice& gpu = *gpus[i];
      Unit unit;
      for (const auto& node : gpu.device_nodes) {
        if (node.exists) unit.edits.device_nodes.push_back(Node(node));
      }
      if (unit.edits.device_nodes.empty()) {
        warnings->push_back(gpu.pci_address + ": no device node present (is /dev/nvidia" +
                            (gpu.nvidia_minor ? std::to_string(*gpu.nvidia_minor) : "?") +
                            " created?); left out of " + kind);
        continue;
      }
      // Index names follow PCI order, as NVML numbers GPUs.
      unit.names = {std::to_string(i), StableName(gpu)};
      AddMigUnits(gpu, i, unit.edits.device_nodes, kind, units);
      units.push_back(std::move(unit));
    }
    Spec spec = Assemble(kind, std::move(units));
    for (const char* role : {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"}) {
      const auto* shared = Shared(role);
      if (shared && shared->node.exists) {
        spec.container_edits.device_nodes.push_back(Node(shared->node));
      } else if (std::string(role) == "nvidiactl" || std::string(role) == "nvidia-uvm") {
        warnings->push_back(std::string("/dev/") + role + " not present; CUDA needs it");
      }
    }
    if (inventory.nvidia_driver) {
      const auto& driver = *inventory.nvidia_driver;
      auto& mounts = spec.container_edits.mounts;
      for (const auto& library : driver.libraries) {
        mounts.push_back(ReadOnlyMount(library.path, library.path));
        // The SONAME link becomes a second bind of the real file, so no hook has to create
        // symlinks inside the container.
        if (!library.soname_link.empty() && library.soname_link != library.path) {
          mounts.push_back(ReadOnlyMount(library.path, library.soname_link));
        }
      }
      // Libraries off the loader's built-in directories (a driver under /usr/local/nvidia, say)
      // are found in the container only where its loader is told to look: the container has no
      // cache entry for them.
      std::vector<std::string> library_dirs;
      for (const auto& library : driver.libraries) {
        std::string dir = library.path.substr(0, library.path.rfind('/'));
        if (!inventory::IsLoaderDefaultDirectory(dir) &&
            std::find(library_dirs.begin(), library_dirs.end(), dir) == library_dirs.end())
          library_dirs.push_back(dir);
      }
      if (!library_dirs.empty()) {
        std::string value;
        for (const auto& dir : library_dirs)
          value += (value.empty() ? "" : ":") + dir;
        spec.container_edits.env.push_back("LD_LIBRARY_PATH=" + value);
      }
      for (const auto& binary : driver.binaries)
        mounts.push_back(ReadOnlyMount(binary, binary));
      for (const auto& firmware : driver.firmware) {
        mounts.push_back(ReadOnlyMount(firmware, firmware));
      }
      for (const auto& socket : driver.ipc_sockets) {
        mounts.push_back(ReadOnlyMount(socket, socket));
      }
    } else {
      warnings->push_back("no NVIDIA driver files found (driver version unknown); " + kind +
                          " has device nodes only");
    }
    // Tells the NVIDIA container runtime hook, if one is also installed, not to inject again.
    spec.container_edits.env.push_back("NVIDIA_VISIBLE_DEVICES=void");
    return spec;
  }

  // ---- vfio mode ----
  Spec Vfio(const std::vector<const PciDevice*>& devices, const std::string& kind) {
    // Devices grouped by IOMMU group, groups in order of their first listed device.
    std::vector<std::pair<int, std::vector<const PciDevice*>>> groups;
    for (const PciDevice* device : devices) {
      if (!device->iommu_group) {
        warnings->push_back(device->pci_address + ": no IOMMU group (IOMMU off?); left out of " +
                            kind);
        continue;
      }
      auto it = std::find_if(groups.begin(), groups.end(),
                             [&](const auto& g) { return g.first == *device->iommu_group; });
      if (it == groups.end()) {
        groups.push_back({*device->iommu_group, {device}});
      } else {
        it->second.push_back(device);
      }
    }
    std::vector<Unit> units;
    size_t index = 0;
    for (const auto& [group, members] : groups) {
      CheckGroupViable(group);
      Unit unit;
      std::string group_path = "/dev/vfio/" + std::to_string(group);
      for (const PciDevice* member : members) {
        for (const auto& node : member->device_nodes) {
          if (!node.exists) continue;
          bool wanted = options.iommufd ? node.path.rfind("/dev/vfio/devices/", 0) == 0
                                        : node.path == group_path;
          bool seen = std::any_of(unit.edits.device_nodes.begin(), unit.edits.device_nodes.end(),
                                  [&](const DeviceNode& n) { return n.path == node.path; });
          if (wanted && !seen) unit.edits.device_nodes.push_back(Node(node));
        }
      }
      if (unit.edits.device_nodes.empty()) {
        warnings->push_back(
            "IOMMU group " + std::to_string(group) + ": " +
            (options.iommufd ? "no /dev/vfio/devices/vfioN node" : "no " + group_path + " node") +
            " present; left out of " + kind);
        continue;
      }
      // One CDI device per group: the group is the unit VFIO can hand out.
      std::string stable = members.size() == 1 ? StableName(*members.front())
                                               : "iommu-group-" + std::to_string(group);
      unit.names = {std::to_string(index++), stable};
      units.push_back(std::move(unit));
    }
    Spec spec = Assemble(kind, std::move(units));
    const char* role = options.iommufd ? "iommufd" : "vfio";
    const auto* shared = Shared(role);
    if (shared && shared->node.exists) {
      spec.container_edits.device_nodes.push_back(Node(shared->node));
    } else {
      warnings->push_back(std::string(options.iommufd ? "/dev/iommu" : "/dev/vfio/vfio") +
                          " not present; " + kind + " devices cannot be opened");
    }
    return spec;
  }

  // A VFIO group is usable only when every function in it is bound to vfio-pci or to nothing.
  void CheckGroupViable(int group) {
    auto it = inventory.iommu_groups.find(group);
    if (it == inventory.iommu_groups.end()) return;
    for (const auto& member : it->second.members) {
      const PciDevice* device = inventory.FindDevice(member);
      if (device && !device->driver.empty() && device->driver != "vfio-pci") {
        warnings->push_back("IOMMU group " + std::to_string(group) + ": member " + member +
                            " is bound to " + device->driver +
                            ", so the group cannot be opened through VFIO");
      }
    }
  }

  // ---- dri mode ----
  Spec Dri(const std::vector<const PciDevice*>& gpus, const std::string& kind) {
    std::vector<Unit> units;
    bool amd = false;
    for (size_t i = 0; i < gpus.size(); ++i) {
      const PciDevice& gpu = *gpus[i];
      Unit unit;
      for (const auto& node : gpu.device_nodes) {
        if (node.exists && node.path.rfind("/dev/dri/", 0) == 0) {
          unit.edits.device_nodes.push_back(Node(node));
        }
      }
      if (unit.edits.device_nodes.empty()) {
        warnings->push_back(gpu.pci_address + ": no /dev/dri node present; left out of " + kind);
        continue;
      }
      amd = amd || gpu.is_amd();
      unit.names = {std::to_string(units.size()), StableName(gpu)};
      units.push_back(std::move(unit));
    }
    Spec spec = Assemble(kind, std::move(units));
    if (amd) {
      const auto* kfd = Shared("kfd");
      if (kfd && kfd->node.exists) {
        spec.container_edits.device_nodes.push_back(Node(kfd->node));
      } else {
        warnings->push_back("/dev/kfd not present; ROCm compute will not work in " + kind);
      }
    }
    return spec;
  }

  // Turns units into CDI devices plus the `all` device.
  static Spec Assemble(const std::string& kind, std::vector<Unit> units) {
    Spec spec;
    spec.kind = kind;
    ContainerEdits all;
    for (auto& unit : units) {
      for (const auto& node : unit.edits.device_nodes) {
        bool seen = std::any_of(all.device_nodes.begin(), all.device_nodes.end(),
                                [&](const DeviceNode& n) { return n.path == node.path; });
        if (!seen) all.device_nodes.push_back(node);
      }
      for (const auto& name : unit.names)
        spec.devices.push_back(Device{name, {}, unit.edits});
    }
    if (!units.empty()) spec.devices.push_back(Device{"all", {}, std::move(all)});
    return spec;
  }
};

// Index names first in numeric order, then the other names, `all` last.
bool DeviceOrder(const Device& a, const Device& b) {
  auto rank = [](const std::string& name) {
    if (name == "all") return 2;
    return !name.empty() && name.find_first_not_of("0123456789") == std::string::npos ? 0 : 1;
  };
  int ra = rank(a.name), rb = rank(b.name);
  if (ra != rb) return ra < rb;
  if (ra == 0 && a.name.size() != b.name.size()) return a.name.size() < b.name.size();
  return a.name < b.name;
}

void Normalize(ContainerEdits* edits) {
  std::sort(edits->env.begin(), edits->env.end());
  edits->env.erase(std::unique(edits->env.begin(), edits->env.end()), edits->env.end());
  auto by_path = [](const DeviceNode& a, const DeviceNode& b) { return a.path < b.path; };
  std::stable_sort(edits->device_nodes.begin(), edits->device_nodes.end(), by_path);
  edits->device_nodes.erase(
      std::unique(edits->device_nodes.begin(), edits->device_nodes.end(),
                  [](const DeviceNode& a, const DeviceNode& b) { return a.path == b.path; }),
      edits->device_nodes.end());
  auto by_target = [](const Mount& a, const Mount& b) {
    return a.container_path < b.container_path;
  };
  std::stable_sort(edits->mounts.begin(), edits->mounts.end(), by_target);
  edits->mounts.erase(std::unique(edits->mounts.begin(), edits->mounts.end(),
                                  [](const Mount& a, const Mount& b) {
                                    return a.container_path == b.container_path;
                                  }),
                      edits->mounts.end());
}

bool HasDriNode(const PciDevice& device) {
  return std::any_of(
      device.device_nodes.begin(), device.device_nodes.end(),
      [](const inventory::DeviceNode& n) { return n.path.rfind("/dev/dri/", 0) == 0; });
}

bool IsGpuLike(const PciDevice& device) {
  return device.kind == DeviceKind::kGpu || device.kind == DeviceKind::kAccelerator;
}

std::string DriKind(const PciDevice& device) {
  if (device.is_amd()) return "amd.com/gpu";
  if (device.is_intel()) return "intel.com/gpu";
  if (device.is_nvidia()) return "nvidia.com/gpu";
  return {};
}

// The devices of an inventory sorted by the mode each is built in.
struct DevicesByMode {
  std::vector<const PciDevice*> driver_gpus, vfio_gpus, vfio_switches;
  std::map<std::string, std::vector<const PciDevice*>> dri_gpus;  // by kind
};

// The mode `device` is built in: `mode` itself unless it is auto, then the one its driver
// implies; none (with a warning for a GPU) when auto finds no mode.
std::optional<Mode> ModeFor(const PciDevice& device, Mode mode,
                            std::vector<std::string>* warnings) {
  if (mode != Mode::kAuto) return mode;
  if (device.driver == "nvidia") return Mode::kDriver;
  if (device.driver == "vfio-pci") return Mode::kVfio;
  if (HasDriNode(device)) return Mode::kDri;
  if (IsGpuLike(device)) {
    warnings->push_back(device.pci_address + ": driver \"" + device.driver +
                        "\" has no CDI mode; left out");
  }
  return std::nullopt;
}

// Files `device` under `mode`, or leaves it out (with a warning when it looks meant for it).
void FileDevice(const PciDevice& device, Mode mode, DevicesByMode* sorted,
                std::vector<std::string>* warnings) {
  switch (mode) {
    case Mode::kDriver:
      if (device.kind != DeviceKind::kGpu || !device.is_nvidia()) break;
      if (device.driver != "nvidia") {
        warnings->push_back(device.pci_address + ": bound to \"" + device.driver +
                            "\", not nvidia; left out of driver mode");
        break;
      }
      sorted->driver_gpus.push_back(&device);
      break;
    case Mode::kVfio:
      if (device.driver != "vfio-pci") {
        if (IsGpuLike(device) || device.kind == DeviceKind::kNvSwitch) {
          warnings->push_back(device.pci_address + ": bound to \"" + device.driver +
                              "\", not vfio-pci; left out of vfio mode");
        }
        break;
      }
      if (IsGpuLike(device)) sorted->vfio_gpus.push_back(&device);
      if (device.kind == DeviceKind::kNvSwitch) sorted->vfio_switches.push_back(&device);
      // Companions (e.g. the NVSwitch board's memory controller) travel with their group.
      break;
    case Mode::kDri:
      if (!IsGpuLike(device)) break;
      if (!HasDriNode(device)) {
        warnings->push_back(device.pci_address + ": no DRM node; left out of dri mode");
        break;
      }
      if (std::string kind = DriKind(device); !kind.empty()) {
        sorted->dri_gpus[kind].push_back(&device);
      } else {
        warnings->push_back(device.pci_address + ": no dri kind for this vendor");
      }
      break;
    case Mode::kAuto:
      break;
  }
}

DevicesByMode SortByMode(const Inventory& inventory, Mode mode,
                         std::vector<std::string>* warnings) {
  DevicesByMode sorted;
  for (const PciDevice& device : inventory.devices) {
    if (auto device_mode = ModeFor(device, mode, warnings)) {
      FileDevice(device, *device_mode, &sorted, warnings);
    }
  }
  return sorted;
}

// The GPU specs (driver, vfio, then one per DRM kind not already taken), empty ones dropped,
// renamed to options.gpu_kind when the caller named one.
Result<std::vector<Spec>> BuildGpuSpecs(Builder& builder, const DevicesByMode& sorted,
                                        const BuildOptions& options) {
  std::vector<Spec> gpu_specs;
  if (!sorted.driver_gpus.empty()) {
    gpu_specs.push_back(builder.Driver(sorted.driver_gpus, "nvidia.com/gpu"));
  }
  if (!sorted.vfio_gpus.empty()) {
    gpu_specs.push_back(builder.Vfio(sorted.vfio_gpus, "nvidia.com/pgpu"));
  }
  for (const auto& entry : sorted.dri_gpus) {
    // Named copies: clang 14 cannot capture structured bindings in lambdas.
    const std::string& kind = entry.first;
    const auto& gpus = entry.second;
    bool taken = std::any_of(gpu_specs.begin(), gpu_specs.end(),
                             [&](const Spec& s) { return s.kind == kind; });
    if (taken) {
      builder.warnings->push_back(kind + ": GPUs on the vendor driver already use this kind; " +
                                  std::to_string(gpus.size()) + " DRM-only GPU(s) left out");
      continue;
    }
    gpu_specs.push_back(builder.Dri(gpus, kind));
  }
  gpu_specs.erase(std::remove_if(gpu_specs.begin(), gpu_specs.end(),
                                 [](const Spec& s) { return s.devices.empty(); }),
                  gpu_specs.end());
  if (!options.gpu_kind.empty()) {
    if (gpu_specs.size() > 1) {
      std::string kinds;
      for (const auto& spec : gpu_specs)
        kinds += (kinds.empty() ? "" : ", ") + spec.kind;
      return InvalidArgument("kind " + options.gpu_kind + " names one spec, but mode " +
                             ModeName(options.mode) + " gives " + std::to_string(gpu_specs.size()) +
                             " (" + kinds + "); choose --mode");
    }
    for (auto& spec : gpu_specs)
      spec.kind = options.gpu_kind;
  }
  return gpu_specs;
}

// Puts each spec in canonical form (edits normalized, devices ordered, lowest version that
// holds it), checks it, and orders the specs by kind, refusing two of one kind.
Status FinishSpecs(std::vector<Spec>* specs) {
  for (Spec& spec : *specs) {
    Normalize(&spec.container_edits);
    for (Device& device : spec.devices)
      Normalize(&device.container_edits);
    std::sort(spec.devices.begin(), spec.devices.end(), DeviceOrder);
    spec.version = MinimumVersion(spec);
    if (auto problems = ValidateSpec(spec); !problems.empty()) {
      return Internal("built an invalid spec " + spec.kind + ": " + FormatProblem(problems[0]));
    }
  }
  std::sort(specs->begin(), specs->end(),
            [](const Spec& a, const Spec& b) { return a.kind < b.kind; });
  for (size_t i = 1; i < specs->size(); ++i) {
    if ((*specs)[i].kind == (*specs)[i - 1].kind) {
      return InvalidArgument("two specs would share kind " + (*specs)[i].kind +
                             "; give the GPUs and NVSwitches different kinds");
    }
  }
  return Ok();
}

}  // namespace

const char* ModeName(Mode mode) {
  switch (mode) {
    case Mode::kAuto:
      return "auto";
    case Mode::kDriver:
      return "driver";
    case Mode::kVfio:
      return "vfio";
    case Mode::kDri:
      return "dri";
  }
  return "auto";
}

Result<Mode> ParseMode(std::string_view name) {
  for (Mode mode : {Mode::kAuto, Mode::kDriver, Mode::kVfio, Mode::kDri}) {
    if (name == ModeName(mode)) return mode;
  }
  return InvalidArgument("mode \"" + std::string(name) + "\": want auto, driver, vfio or dri");
}

Result<BuildResult> BuildSpecs(const Inventory& inventory, const BuildOptions& options) {
  if (!options.gpu_kind.empty()) {
    if (auto problem = CheckKind(options.gpu_kind); !problem.empty()) {
      return InvalidArgument("kind: " + problem);
    }
  }
  if (auto problem = CheckKind(options.nvswitch_kind); !problem.empty()) {
    return InvalidArgument("nvswitch kind: " + problem);
  }
  BuildResult result;
  Builder builder{inventory, options, &result.warnings};
  DevicesByMode sorted = SortByMode(inventory, options.mode, &result.warnings);
  auto gpu_specs = BuildGpuSpecs(builder, sorted, options);
  if (!gpu_specs) return gpu_specs.error();
  result.specs = std::move(*gpu_specs);
  if (!sorted.vfio_switches.empty()) {
    Spec switches = builder.Vfio(sorted.vfio_switches, options.nvswitch_kind);
    if (!switches.devices.empty()) result.specs.push_back(std::move(switches));
  }
  if (auto finished = FinishSpecs(&result.specs); !finished) return finished.error();
  return result;
}

}  // namespace tessera::cdi

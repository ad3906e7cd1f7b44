// Reads <root>/sys/bus/pci/devices: identity, driver, IOMMU group, NUMA, BARs, link, bridges.
#include <algorithm>
#include <set>

#include "inventory/parsers.h"
#include "inventory/readers.h"

namespace tessera::inventory {
namespace {

constexpr uint16_t kNvidia = 0x10de;

// Reads a hex sysfs attribute of a device; records a warning naming the file on failure.
std::optional<uint32_t> ReadHex(const HostDirectory& dir, const char* name, int bits,
                                std::vector<std::string>& warnings) {
  auto text = dir.ReadAttribute(name);
  if (!text) {
    warnings.push_back(text.error().message);
    return std::nullopt;
  }
  auto value = ParseHexAttribute(*text, bits);
  if (!value) {
    warnings.push_back(dir.path() + "/" + name + ": " + value.error().message);
    return std::nullopt;
  }
  return *value;
}

// Bridges between the root complex and the device, nearest first, from the resolved sysfs path
// (/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:10.0/0000:03:00.0).
std::vector<std::string> UpstreamBridges(const std::string& device_path, const std::string& self) {
  std::vector<std::string> bridges;
  size_t start = 0;
  while (start < device_path.size()) {
    size_t end = device_path.find('/', start);
    if (end == std::string::npos) end = device_path.size();
    std::string_view part(device_path.data() + start, end - start);
    if (IsPciAddress(part) && part != self) bridges.emplace_back(part);
    start = end + 1;
  }
  std::reverse(bridges.begin(), bridges.end());
  return bridges;
}

void ReadPcieLink(const HostDirectory& dir, PciDevice& device) {
  auto read = [&](const char* name) -> std::optional<std::string> {
    auto text = dir.ReadAttribute(name);
    if (!text) return std::nullopt;  // absent on non-PCIe (conventional PCI) functions
    return *text;
  };
  auto speed = read("current_link_speed");
  auto width = read("current_link_width");
  if (!speed || !width) return;
  PcieLink link;
  link.current_speed = *speed;
  auto w = ParseIntAttribute(*width);
  if (!w) {
    device.warnings.push_back(dir.path() + "/current_link_width: " + w.error().message);
    return;
  }
  link.current_width = *w;
  link.max_speed = read("max_link_speed").value_or("");
  if (auto max_width = read("max_link_width")) {
    auto mw = ParseIntAttribute(*max_width);
    if (mw) link.max_width = *mw;
  }
  device.link = link;
}

// A function that is not ours, kept for companion matching.
struct ScannedFunction {
  std::string address;
  uint16_t vendor = 0;
  uint32_t class_code = 0;
  std::optional<int> iommu_group;
};

// Pass 1: read the class of every function; keep ours in `walk`, return the others.
std::vector<ScannedFunction> ScanPciFunctions(const HostRoot& host, const std::string& bus,
                                              const std::vector<std::string>& names, PciWalk& walk,
                                              std::vector<std::string>& warnings) {
  std::vector<ScannedFunction> others;
  for (const std::string& name : names) {
    if (!IsPciAddress(name)) {
      warnings.push_back(bus + "/" + name + ": not a PCI address, skipped");
      continue;
    }
    auto dir = host.OpenDirectory(bus + "/" + name);
    if (!dir) {
      warnings.push_back(dir.error().message);  // dangling link or a loop
      continue;
    }
    std::vector<std::string> local;
    auto class_code = ReadHex(*dir, "class", 24, local);
    auto vendor = ReadHex(*dir, "vendor", 16, local);
    if (!class_code || !vendor) {
      for (auto& w : local)
        warnings.push_back(w);
      continue;
    }
    auto kind = ClassifyPciFunction(static_cast<uint16_t>(*vendor), *class_code);
    std::optional<int> group;
    if (auto link = dir->ReadLink("iommu_group")) {
      auto number = ParseIntAttribute(BaseName(*link));
      if (number) group = *number;
    }
    if (!kind) {
      others.push_back({name, static_cast<uint16_t>(*vendor), *class_code, group});
      continue;
    }
    PciDevice device;
    device.pci_address = name;
    device.vendor_id = static_cast<uint16_t>(*vendor);
    device.class_code = *class_code;
    device.kind = *kind;
    device.iommu_group = group;
    walk.devices.push_back(std::move(device));
  }
  return others;
}

// Pass 2: companions share an NVSwitch's IOMMU group or its slot (bus:device).
void AddCompanions(const std::vector<ScannedFunction>& others, PciWalk& walk) {
  std::set<int> switch_groups;
  std::set<std::string> switch_slots;
  for (const auto& device : walk.devices) {
    if (device.kind != DeviceKind::kNvSwitch) continue;
    if (device.iommu_group) switch_groups.insert(*device.iommu_group);
    switch_slots.insert(device.pci_address.substr(0, 10));
  }
  for (const auto& function : others) {
    bool same_group = function.iommu_group && switch_groups.count(*function.iommu_group);
    bool same_slot = switch_slots.count(function.address.substr(0, 10)) > 0;
    // A bridge in the group is the switch's own upstream port, not a companion.
    bool is_bridge = (function.class_code >> 8) == 0x0604;
    if ((same_group || same_slot) && !is_bridge) {
      PciDevice device;
      device.pci_address = function.address;
      device.vendor_id = function.vendor;
      device.class_code = function.class_code;
      device.kind = DeviceKind::kCompanion;
      device.iommu_group = function.iommu_group;
      walk.devices.push_back(std::move(device));
    }
  }
}

// IDs, driver, NUMA node, BARs, link and upstream bridges; false when the directory is gone.
bool ReadDeviceAttributes(const HostRoot& host, const std::string& dir_path, PciDevice& device) {
  auto& w = device.warnings;
  auto opened = host.OpenDirectory(dir_path);
  if (!opened) {
    w.push_back(opened.error().message);
    return false;
  }
  const HostDirectory& dir = *opened;
  if (auto v = ReadHex(dir, "device", 16, w)) device.device_id = static_cast<uint16_t>(*v);
  if (auto v = ReadHex(dir, "subsystem_vendor", 16, w)) {
    device.subsystem_vendor_id = static_cast<uint16_t>(*v);
  }
  if (auto v = ReadHex(dir, "subsystem_device", 16, w)) {
    device.subsystem_device_id = static_cast<uint16_t>(*v);
  }
  if (auto v = ReadHex(dir, "revision", 8, w)) device.revision = static_cast<uint8_t>(*v);

  if (auto target = dir.ReadLink("driver")) device.driver = BaseName(*target);

  if (auto numa = dir.ReadAttribute("numa_node")) {
    auto value = ParseIntAttribute(*numa);
    if (value && *value >= -1) {
      device.numa_node = *value;
    } else {
      w.push_back(dir_path + "/numa_node: " +
                  (value ? "negative node " + std::to_string(*value) : value.error().message));
    }
  }

  if (auto resource = dir.ReadFile("resource")) {
    auto bars = ParseResourceFile(*resource);
    if (bars) {
      device.bars = std::move(*bars);
    } else {
      w.push_back(dir_path + "/resource: " + bars.error().message);
    }
  } else {
    w.push_back(resource.error().message);
  }

  ReadPcieLink(dir, device);

  auto real = host.Canonical(dir_path);
  if (real) {
    device.upstream_bridges = UpstreamBridges(*real, device.pci_address);
  } else {
    w.push_back(real.error().message);
  }

  if (!device.iommu_group && dir.Has("iommu_group")) {
    w.push_back(dir_path + "/iommu_group: link does not name a group number");
  }
  return true;
}

// The device's IOMMU group and its members, once per group.
void AddIommuGroup(const HostRoot& host, PciDevice& device, PciWalk& walk) {
  if (!device.iommu_group || walk.iommu_groups.count(*device.iommu_group)) return;
  int number = *device.iommu_group;
  IommuGroup group{number, {}};
  std::string members_dir = "/sys/kernel/iommu_groups/" + std::to_string(number) + "/devices";
  auto members = host.ListDirectory(members_dir);
  if (members) {
    for (auto& member : *members) {
      if (IsPciAddress(member)) group.members.push_back(member);
    }
  } else {
    device.warnings.push_back(members.error().message);
  }
  if (std::find(group.members.begin(), group.members.end(), device.pci_address) ==
      group.members.end()) {
    group.members.push_back(device.pci_address);
    std::sort(group.members.begin(), group.members.end());
  }
  walk.iommu_groups.emplace(number, std::move(group));
}

}  // namespace

std::optional<DeviceKind> ClassifyPciFunction(uint16_t vendor_id, uint32_t class_code) {
  uint32_t base_sub = class_code >> 8;
  if (base_sub == 0x0300 || base_sub == 0x0302 || base_sub == 0x0380) return DeviceKind::kGpu;
  if ((class_code >> 16) == 0x12) return DeviceKind::kAccelerator;
  if (vendor_id == kNvidia && base_sub == 0x0680) return DeviceKind::kNvSwitch;
  return std::nullopt;
}

PciWalk WalkPci(const HostRoot& host, std::vector<std::string>& warnings) {
  const std::string bus = "/sys/bus/pci/devices";
  PciWalk walk;
  auto names = host.ListDirectory(bus);
  if (!names) {
    // No PCI bus (containers, some VMs): an empty inventory, said once.
    warnings.push_back(names.error().message);
    return walk;
  }
  std::vector<ScannedFunction> others = ScanPciFunctions(host, bus, *names, walk, warnings);
  AddCompanions(others, walk);
  std::sort(walk.devices.begin(), walk.devices.end(),
            [](const PciDevice& a, const PciDevice& b) { return a.pci_address < b.pci_address; });
  // Pass 3: the rest of each device's attributes.
  for (PciDevice& device : walk.devices) {
    if (ReadDeviceAttributes(host, bus + "/" + device.pci_address, device))
      AddIommuGroup(host, device, walk);
  }
  return walk;
}

}  // namespace tessera::inventory

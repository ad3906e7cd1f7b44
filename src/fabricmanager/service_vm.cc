// The Service VM that owns the NVSwitches in shared NVSwitch mode: which PCI functions it takes,
// its libvirt domain and its fabricmanager.cfg. Pure.
//
// Facts (FM user guide, shared NVSwitch virtualization; NVIDIA/libvirt-hooks; kata #13430/#13431):
// on HGX H100/H200 the VM takes the four NVSwitches (10de:22a3, class 0x0680) and every function
// of their IOMMU groups (Supermicro-style boards put the PMC-Sierra 11f8:4128 management
// function in the same group; a group member left on the host fails VFIO with "Bad address"),
// never a GPU; the fabric manager runs with FABRIC_MODE=1 and listens on the VM's address for
// the host's partition calls. B200/B300 boards have no NVSwitch PCI function: their switches are
// managed through ConnectX-7 bridge functions (VPD SMDL=SW_MNG) with NVLSM.
#include <algorithm>
#include <cstdio>
#include <set>

#include "common/pci_address.h"
#include "common/untrusted_text.h"
#include "fabricmanager/operator_tools.h"

namespace tessera::fabricmanager {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

std::string XmlEscape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '\'':
        out += "&apos;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

bool IsIpv4Literal(std::string_view text) {
  auto address = ParseFabricAddress(text);
  return address && !address->unix_socket && address->ToString() == std::string(text) + ":6666" &&
         text.find_first_not_of("0123456789.") == std::string_view::npos;
}

Status CheckOptions(const ServiceVmOptions& options) {
  const auto& name = options.name;
  if (name.empty() || name.size() > 64 ||
      !std::all_of(name.begin(), name.end(),
                   [](char c) {
                     return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' ||
                            c == '.';
                   }) ||
      name.front() == '.' || name.front() == '-') {
    return InvalidArgument("--name \"" + Excerpt(name) +
                           "\": 1 to 64 letters, digits, '-', '_' or '.', not starting with '.' "
                           "or '-'");
  }
  if (options.vcpus < 1 || options.vcpus > 64) return InvalidArgument("--vcpus: 1 to 64");
  if (options.memory_mib < 1024 || options.memory_mib > (1 << 20))
    return InvalidArgument("--memory-mib: 1024 to 1048576 (the fabric manager needs about 4096)");
  if (!options.disk.empty()) {
    if (options.disk.front() != '/' || options.disk.size() > 4096 ||
        std::any_of(options.disk.begin(), options.disk.end(),
                    [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; })) {
      return InvalidArgument("--disk \"" + Excerpt(options.disk) +
                             "\": an absolute path without control characters");
    }
  }
  if (!IsIpv4Literal(options.fm_address))
    return InvalidArgument("--fm-address \"" + Excerpt(options.fm_address) +
                           "\": the VM's IPv4 address (the fabric manager binds to IPv4)");
  if (options.network.empty() || options.network.size() > 64 ||
      !std::all_of(options.network.begin(), options.network.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
      })) {
    return InvalidArgument("network \"" + Excerpt(options.network) +
                           "\": not a libvirt network name");
  }
  return Ok();
}

// A locally administered MAC in QEMU's 52:54:00 range, stable for a name (FNV-1a).
std::string MacFor(const std::string& name) {
  uint32_t hash = 2166136261u;
  for (unsigned char c : name)
    hash = (hash ^ c) * 16777619u;
  char mac[18];
  std::snprintf(mac, sizeof mac, "52:54:00:%02x:%02x:%02x", (hash >> 16) & 0xff, (hash >> 8) & 0xff,
                hash & 0xff);
  return mac;
}

// Bridges stay with the host (PCI-to-PCI 0x0604, host 0x0600, semi-transparent 0x0609). The
// NVSwitch itself is class 0x0680 ("other bridge") and goes to the VM.
bool IsHostBridge(uint32_t class_code) {
  const uint32_t cls = class_code >> 8;
  return cls == 0x0600 || cls == 0x0604 || cls == 0x0609;
}

bool IsGpuClass(uint32_t class_code) {
  return (class_code >> 16) == 0x03 || (class_code >> 16) == 0x12;
}

uint64_t RoundUpPowerOfTwo(uint64_t value) {
  uint64_t out = 1;
  while (out < value)
    out <<= 1;
  return out;
}

}  // namespace

bool IsNvlink5Gpu(uint16_t vendor_id, uint16_t device_id) {
  return vendor_id == 0x10de && (device_id == 0x2901 || device_id == 0x3182);
}

namespace {

// The NVSwitches the VM owns (into vm->nvswitches) and their IOMMU groups; refuses a host
// without any, or with one outside an IOMMU group.
Result<std::set<int>> CollectNvSwitches(const inventory::Inventory& inventory, ServiceVm* vm) {
  std::set<int> groups;
  for (const auto& device : inventory.devices) {
    if (device.kind != inventory::DeviceKind::kNvSwitch) continue;
    if (!device.iommu_group) {
      return FailedPrecondition("NVSwitch " + device.pci_address +
                                " has no IOMMU group (is the IOMMU on? intel_iommu=on / "
                                "amd_iommu=on): it cannot be passed to a VM");
    }
    vm->nvswitches.push_back(device.pci_address);
    groups.insert(*device.iommu_group);
  }
  if (vm->nvswitches.empty()) {
    for (const auto* gpu : inventory.Gpus()) {
      if (IsNvlink5Gpu(gpu->vendor_id, gpu->device_id)) {
        return FailedPrecondition(
            "this host's GPUs (" + gpu->model +
            ") sit on a B200/B300 board, which has no NVSwitch PCI functions: its NVLink "
            "switches are managed through ConnectX-7 bridge functions (VPD SMDL=SW_MNG) and "
            "NVLSM, which tessera does not set up yet. No Service VM written");
      }
    }
    return FailedPrecondition(
        "no NVSwitch (10de:22a3, class 0x0680) on this host: nothing for a Service VM to own");
  }
  return groups;
}

// Every function in those groups but the host's bridges goes to the VM (vm->hostdevs), with a
// 64-bit PCI hole to hold their BARs; a GPU in one of the groups is refused.
Status CollectHostdevs(const inventory::Inventory& inventory,
                       const std::map<std::string, runtimes::PciFunction>& members,
                       const std::set<int>& groups, ServiceVm* vm) {
  std::set<std::string> hostdevs;
  uint64_t bar_bytes = 0;
  for (int group : groups) {
    auto it = inventory.iommu_groups.find(group);
    if (it == inventory.iommu_groups.end()) continue;
    for (const auto& member : it->second.members) {
      const inventory::PciDevice* device = inventory.FindDevice(member);
      uint32_t class_code = device ? device->class_code : 0;
      if (auto fact = members.find(member); fact != members.end() && fact->second.class_code)
        class_code = fact->second.class_code;
      if (IsGpuClass(class_code)) {
        return FailedPrecondition("IOMMU group " + std::to_string(group) + " holds GPU " + member +
                                  " as well as an NVSwitch: the Service VM must never take a GPU");
      }
      if (IsHostBridge(class_code)) continue;
      hostdevs.insert(member);
      if (device) {
        for (const auto& bar : device->bars)
          if (bar.index < 6) bar_bytes += bar.size;
      }
    }
  }
  vm->hostdevs.assign(hostdevs.begin(), hostdevs.end());
  // The guest firmware places the functions' BARs in the 64-bit window: twice their sum leaves
  // room for alignment, in whole GiB.
  vm->pcihole64_gib = RoundUpPowerOfTwo(std::max<uint64_t>(1, (2 * bar_bytes + kGiB - 1) / kGiB));
  return Ok();
}

// The <hostdev> elements that pass `hostdevs` (sysfs addresses) to the VM through vfio.
Result<std::string> HostdevXml(const std::vector<std::string>& hostdevs) {
  std::string xml;
  for (const auto& address : hostdevs) {
    // Sysfs form "dddd:bb:dd.f" (the inventory only holds canonical addresses).
    if (!IsPciAddress(address))
      return Internal("IOMMU group member " + Excerpt(address) + ": not a PCI address");
    const std::string source = "        <address domain='0x" + address.substr(0, 4) + "' bus='0x" +
                               address.substr(5, 2) + "' slot='0x" + address.substr(8, 2) +
                               "' function='0x" + address.substr(11, 1) + "'/>\n";
    xml += "    <hostdev mode='subsystem' type='pci' managed='yes'>\n";
    xml += "      <driver name='vfio'/>\n      <source>\n" + source +
           "      </source>\n    </hostdev>\n";
  }
  return xml;
}

// The libvirt domain of the VM: q35 with UEFI, locked memory, its disk, a NIC for the fabric
// manager's API, a vsock and its PCI functions.
Result<std::string> DomainXml(const ServiceVm& vm, const ServiceVmOptions& options) {
  const std::string disk =
      options.disk.empty() ? "/var/lib/libvirt/images/" + options.name + ".qcow2" : options.disk;
  const bool qcow2 = disk.size() > 6 && disk.substr(disk.size() - 6) == ".qcow2";
  std::string xml;
  xml += "<domain type='kvm'>\n";
  xml += "  <name>" + options.name + "</name>\n";
  xml +=
      "  <description>NVIDIA Fabric Manager Service VM (shared NVSwitch mode): owns the "
      "NVSwitches, never a GPU. Written by tessera fabric service-vm.</description>\n";
  xml += "  <memory unit='MiB'>" + std::to_string(options.memory_mib) + "</memory>\n";
  xml += "  <currentMemory unit='MiB'>" + std::to_string(options.memory_mib) + "</currentMemory>\n";
  // Passed-through devices DMA into guest memory: it is pinned anyway; say so.
  xml += "  <memoryBacking>\n    <locked/>\n  </memoryBacking>\n";
  xml += "  <vcpu placement='static'>" + std::to_string(options.vcpus) + "</vcpu>\n";
  xml +=
      "  <os firmware='efi'>\n    <type arch='x86_64' machine='q35'>hvm</type>\n"
      "    <boot dev='hd'/>\n  </os>\n";
  xml += "  <features>\n    <acpi/>\n    <apic/>\n  </features>\n";
  xml += "  <cpu mode='host-passthrough' check='none'/>\n";
  xml += "  <clock offset='utc'/>\n";
  xml +=
      "  <on_poweroff>destroy</on_poweroff>\n  <on_reboot>restart</on_reboot>\n"
      "  <on_crash>restart</on_crash>\n";
  xml += "  <devices>\n";
  xml += "    <controller type='pci' index='0' model='pcie-root'>\n";
  xml += "      <pcihole64 unit='GiB'>" + std::to_string(vm.pcihole64_gib) + "</pcihole64>\n";
  xml += "    </controller>\n";
  xml += "    <disk type='file' device='disk'>\n";
  xml += std::string("      <driver name='qemu' type='") + (qcow2 ? "qcow2" : "raw") + "'/>\n";
  xml += "      <source file='" + XmlEscape(disk) + "'/>\n";
  xml += "      <target dev='vda' bus='virtio'/>\n    </disk>\n";
  // The host reaches the fabric manager's API (FM_CMD_BIND_INTERFACE:6666) over this NIC.
  xml += "    <interface type='network'>\n      <mac address='" + vm.mac + "'/>\n";
  xml += "      <source network='" + options.network + "'/>\n      <model type='virtio'/>\n";
  xml += "    </interface>\n";
  xml += "    <vsock model='virtio'>\n      <cid auto='yes'/>\n    </vsock>\n";
  auto hostdevs = HostdevXml(vm.hostdevs);
  if (!hostdevs) return hostdevs.error();
  xml += *hostdevs;
  xml += "    <serial type='pty'/>\n    <console type='pty'/>\n";
  xml += "  </devices>\n</domain>\n";
  return xml;
}

}  // namespace

Result<ServiceVm> BuildServiceVm(const inventory::Inventory& inventory,
                                 const std::map<std::string, runtimes::PciFunction>& members,
                                 const ServiceVmOptions& options) {
  if (auto ok = CheckOptions(options); !ok) return ok.error();
  ServiceVm vm;
  auto groups = CollectNvSwitches(inventory, &vm);
  if (!groups) return groups.error();
  if (auto ok = CollectHostdevs(inventory, members, *groups, &vm); !ok) return ok.error();
  vm.mac = MacFor(options.name);
  auto xml = DomainXml(vm, options);
  if (!xml) return xml.error();
  vm.domain_xml = std::move(*xml);
  vm.fabricmanager_cfg = FabricManagerConfig(options);
  return vm;
}

std::string FabricManagerConfig(const ServiceVmOptions& options) {
  std::string cfg;
  cfg += "# NVIDIA Fabric Manager configuration for the Service VM " + options.name +
         ", written by\n# tessera fabric service-vm. Install it in the VM as\n"
         "# /usr/share/nvidia/nvswitch/fabricmanager.cfg.\n";
  cfg +=
      "# Shared NVSwitch virtualization: this VM owns the NVSwitches; the host activates\n"
      "# partitions through the API at FM_CMD_BIND_INTERFACE:FM_CMD_PORT_NUMBER.\n";
  cfg +=
      "LOG_LEVEL=4\nLOG_FILE_NAME=/var/log/fabricmanager.log\nLOG_APPEND_TO_LOG=1\n"
      "LOG_FILE_MAX_SIZE=1024\nLOG_USE_SYSLOG=0\nDAEMONIZE=1\n";
  cfg +=
      "# Internal IPC between the fabric manager's parts.\n"
      "BIND_INTERFACE_IP=127.0.0.1\nSTARTING_TCP_PORT=16000\nUNIX_SOCKET_PATH=\n";
  cfg += "# 1: shared NVSwitch multitenancy.\nFABRIC_MODE=1\n";
  cfg +=
      "# Restart in resiliency mode: running guests keep NVLink while it is down; after a\n"
      "# restart it waits (60 s) for the host to send the active partition list.\n"
      "FABRIC_MODE_RESTART=1\nSTATE_FILE_NAME=/tmp/fabricmanager.state\n";
  cfg += "# The API the host calls (tessera --fabric-manager " + options.fm_address + ").\n";
  cfg += "FM_CMD_BIND_INTERFACE=" + options.fm_address +
         "\nFM_CMD_PORT_NUMBER=6666\n"
         "FM_CMD_UNIX_SOCKET_PATH=\n";
  cfg +=
      "FM_STAY_RESIDENT_ON_FAILURES=0\nACCESS_LINK_FAILURE_MODE=0\nTRUNK_LINK_FAILURE_MODE=0\n"
      "NVSWITCH_FAILURE_MODE=0\nABORT_CUDA_JOBS_ON_FM_EXIT=1\n";
  cfg +=
      "TOPOLOGY_FILE_PATH=/usr/share/nvidia/nvswitch\nDATABASE_PATH=/usr/share/nvidia/nvswitch\n";
  return cfg;
}

Result<std::map<std::string, std::string>> ParseFabricManagerConfig(std::string_view text) {
  if (text.size() > 64 * 1024) return InvalidArgument("fabricmanager.cfg: larger than 64 KiB");
  std::map<std::string, std::string> out;
  size_t line_number = 0, start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    if (++line_number > 1024) return InvalidArgument("fabricmanager.cfg: more than 1024 lines");
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    size_t first = line.find_first_not_of(" \t");
    if (first == std::string_view::npos || line[first] == '#') continue;
    line.remove_prefix(first);
    const std::string where = "fabricmanager.cfg line " + std::to_string(line_number);
    size_t equals = line.find('=');
    if (equals == std::string_view::npos || equals == 0)
      return InvalidArgument(where + ": expected KEY=VALUE, got \"" + Excerpt(line) + "\"");
    std::string_view key = line.substr(0, equals);
    while (!key.empty() && (key.back() == ' ' || key.back() == '\t'))
      key.remove_suffix(1);
    if (key.empty() || key.size() > 64 || !std::all_of(key.begin(), key.end(), [](char c) {
          return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
        })) {
      return InvalidArgument(where + ": \"" + Excerpt(key) + "\" is not a setting name");
    }
    std::string_view value = line.substr(equals + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
      value.remove_prefix(1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t'))
      value.remove_suffix(1);
    if (std::any_of(value.begin(), value.end(),
                    [](char c) { return static_cast<unsigned char>(c) < 0x20 && c != '\t'; }))
      return InvalidArgument(where + ": control characters in the value of " + std::string(key));
    if (!out.emplace(std::string(key), std::string(value)).second)
      return InvalidArgument(where + ": " + std::string(key) + " is set twice");
  }
  return out;
}

}  // namespace tessera::fabricmanager

// What operators use around the fabric manager (the `tessera fabric` and `tessera doctor`
// commands): the partition listing formats, the Service VM that owns the NVSwitches in shared
// NVSwitch mode (a libvirt domain and its fabricmanager.cfg), and doctor's fabric checks. Pure:
// an Inventory and facts in, text and checks out.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "deviceplugin/deviceplugin.h"
#include "fabricmanager/fabricmanager.h"
#include "inventory/inventory.h"
#include "runtimes/runtimes.h"

namespace tessera::fabricmanager {

// ---------------------------------------------------------------------------------------------
// `tessera fabric partitions`.

// The table the fabric manager's documentation shows, with each GPU's PCI address where this
// host knows it: PARTITION ID  STATUS  GPUs  NVLINKS  GPU PHYSICAL IDs  PCI ADDRESSES.
std::string PartitionsTable(const std::vector<SupportedPartition>& partitions,
                            const ModuleMap& modules);
// {"partitions": [{"id", "active", "nvlinks", "gpus": [{"module", "pci_address"}]}]}; an unknown
// address is null.
std::string PartitionsJson(const std::vector<SupportedPartition>& partitions,
                           const ModuleMap& modules);

// ---------------------------------------------------------------------------------------------
// The Service VM.

struct ServiceVmOptions {
  std::string name = "tessera-fabric-manager";
  int vcpus = 2;
  int memory_mib = 4096;
  std::string disk;  // the VM's system image; default /var/lib/libvirt/images/<name>.qcow2
  // The VM's IPv4 address on its NIC: where its fabric manager listens (FM_CMD_BIND_INTERFACE)
  // and where tessera reaches it (--fabric-manager ADDRESS).
  std::string fm_address = "192.168.122.2";
  std::string network = "default";  // libvirt network of that NIC
};

struct ServiceVm {
  std::string domain_xml;
  std::string fabricmanager_cfg;
  std::vector<std::string> hostdevs;  // PCI addresses passed through, sorted
  std::vector<std::string> nvswitches;
  uint64_t pcihole64_gib = 0;
  std::string mac;  // the NIC's, derived from the name (for a DHCP reservation)
};

// The functions a Service VM must own, and its domain. `members` describes every member of the
// NVSwitches' IOMMU groups (driver, class), as runtimes::ReadHostFacts gathers them.
// FailedPrecondition when the host has no NVSwitch PCI function (B200/B300 boards: said so), an
// NVSwitch has no IOMMU group, or a group also holds a GPU; InvalidArgument for bad options.
Result<ServiceVm> BuildServiceVm(const inventory::Inventory& inventory,
                                 const std::map<std::string, runtimes::PciFunction>& members,
                                 const ServiceVmOptions& options);

// fabricmanager.cfg for the Service VM: FABRIC_MODE=1 (shared NVSwitch), FABRIC_MODE_RESTART=1,
// the command interface on `fm_address`:6666, a state file for the restart.
std::string FabricManagerConfig(const ServiceVmOptions& options);

// Reads fabricmanager.cfg (KEY=VALUE lines, '#' comments): keys in order of the file. Bounded
// (64 KiB, 1024 lines); errors name the line.
Result<std::map<std::string, std::string>> ParseFabricManagerConfig(std::string_view text);

// B200 (10de:2901) and B300 (10de:3182): boards whose NVLink switches have no PCI function.
bool IsNvlink5Gpu(uint16_t vendor_id, uint16_t device_id);

// ---------------------------------------------------------------------------------------------
// `tessera doctor` fabric checks.

struct FabricDoctorInput {
  const inventory::Inventory* inventory = nullptr;
  std::map<std::string, runtimes::PciFunction> members;  // NVSwitch group members
  bool service_vm = false;                               // the NVSwitches go to a Service VM
  std::optional<std::string> fm_address;                 // --fabric-manager, when given
  std::optional<Result<std::vector<SupportedPartition>>> listed;  // asking it, when given
  ModuleMap modules;                                              // module -> PCI where known
  std::optional<deviceplugin::LeaseMap> leases;                   // the node's lease file
  std::optional<std::string> config_path;                         // a fabricmanager.cfg to check
  std::optional<Result<std::map<std::string, std::string>>> config;
};

// fabric.nvswitch_vfio (Service VM: every NVSwitch group member on vfio-pci), fabric.manager
// (reachable, shared NVSwitch mode), fabric.leases (active partitions = leased GPUs),
// fabric.config (FABRIC_MODE=1, FABRIC_MODE_RESTART=1, the address tessera uses).
std::vector<runtimes::Check> FabricChecks(const FabricDoctorInput& input);

}  // namespace tessera::fabricmanager

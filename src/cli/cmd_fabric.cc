// `tessera fabric`: NVLink fabric partitions through NVIDIA Fabric Manager (list, activate,
// deactivate, set the active list after a restart) and the Service VM that owns the NVSwitches.
#include <sys/stat.h>

#include <filesystem>
#include <iostream>

#include "cli/commands.h"
#include "common/atomic_file.h"
#include "fabricmanager/operator_tools.h"
#include "inventory/inventory.h"

namespace tessera::cli {
namespace {

struct FabricFlags {
  std::string address = "127.0.0.1";
  std::string library = "libnvfm.so.1";
  std::string partition_table;
  std::string root = "/";
  std::optional<std::string> nvml;
  std::string format = "table";
  unsigned deadline_ms = fabricmanager::kDefaultCallDeadlineMs;
};

void AddConnectionFlags(CLI::App* cmd, FabricFlags* flags) {
  cmd->add_option("--fabric-manager", flags->address,
                  "Fabric manager API: host[:port] (port 6666 by default) or unix:PATH")
      ->capture_default_str();
  cmd->add_option("--nvfm-library", flags->library,
                  "Fabric Manager client library (libnvfm.so.1, or a path)")
      ->capture_default_str();
  // A hung fabric manager fails the command after this long instead of holding it.
  cmd->add_option("--fabric-manager-timeout", flags->deadline_ms,
                  "Deadline of each fabric-manager call (connect, list, activate, ...): 100ms to "
                  "5m, e.g. 10s or 2500ms (a bare number is milliseconds)")
      ->transform(CLI::AsNumberWithUnit(
          std::map<std::string, unsigned>{{"ms", 1}, {"s", 1000}, {"m", 60000}}))
      ->check(CLI::Range(100u, 300000u))
      ->default_str("10s");
}

std::unique_ptr<fabricmanager::FabricManager> Connect(const FabricFlags& flags) {
  auto fabric = fabricmanager::ConnectNvfmAt(flags.address, flags.library, flags.deadline_ms);
  if (!fabric) Fail(fabric.error());
  return std::move(*fabric);
}

[[noreturn]] void FailAt(const FabricFlags& flags, const Error& error) {
  Fail(error.WithContext("fabric manager at " + flags.address));
}

// The board's module count when --partition-table names one (0: unknown). A table that does not
// load is reported by the module map, which loads it too.
int BoardModules(const FabricFlags& flags) {
  if (flags.partition_table.empty()) return 0;
  auto table = fabricmanager::LoadPartitionTable(flags.partition_table);
  return table ? table->module_count : 0;
}

void ListPartitions(const FabricFlags& flags) {
  auto fabric = Connect(flags);
  auto listed = fabric->ListPartitions();
  if (!listed) FailAt(flags, listed.error());
  inventory::ReadOptions read;
  read.root = flags.root;
  read.read_driver_files = false;
  auto inv = inventory::ReadInventory(read);
  if (!inv) Fail(inv.error().WithContext("inventory of " + flags.root));
  std::vector<std::string> gpus;
  for (const auto* gpu : inv->Gpus())
    gpus.push_back(gpu->pci_address);
  auto modules = fabricmanager::MapHostModules(
      *listed, flags.partition_table, gpus,
      flags.nvml ? *flags.nvml : inventory::DefaultNvmlLibrary(flags.root));
  if (!modules) Fail(modules.error());
  std::cout << (flags.format == "json" ? fabricmanager::PartitionsJson(*listed, *modules)
                                       : fabricmanager::PartitionsTable(*listed, *modules))
            << std::flush;
  // The list is shown, then judged exactly as serve judges it at start.
  if (auto usable = fabricmanager::ValidateListing(*listed, BoardModules(flags)); !usable)
    Fail(FailedPrecondition(usable.error().message +
                            " (tessera serve --fabric-manager refuses to start on it)"));
}

struct ServiceVmFlags {
  std::string root = "/";
  std::string output_dir;
  fabricmanager::ServiceVmOptions vm;
};

void WriteServiceVm(const ServiceVmFlags& flags) {
  runtimes::HostFactsOptions read;
  read.root = flags.root;
  read.ask_tools = false;
  auto facts = runtimes::ReadHostFacts(read);
  if (!facts) Fail(facts.error());
  auto vm = fabricmanager::BuildServiceVm(facts->inventory, facts->group_members, flags.vm);
  if (!vm) Fail(vm.error());
  std::error_code error;
  std::filesystem::create_directories(flags.output_dir, error);
  if (error) Fail(Unavailable("--output-dir " + flags.output_dir + ": " + error.message()));
  const std::string domain = flags.output_dir + "/" + flags.vm.name + ".xml";
  const std::string cfg = flags.output_dir + "/fabricmanager.cfg";
  if (auto written = WriteFileAtomically(domain, vm->domain_xml, 0644); !written)
    Fail(written.error());
  if (auto written = WriteFileAtomically(cfg, vm->fabricmanager_cfg, 0644); !written)
    Fail(written.error());
  std::string functions;
  for (const auto& address : vm->hostdevs)
    functions += (functions.empty() ? "" : " ") + address;
  std::cout << "wrote " << domain << ": " << vm->hostdevs.size() << " PCI functions (" << functions
            << "), pcihole64 " << vm->pcihole64_gib << " GiB\n"
            << "wrote " << cfg << ": FABRIC_MODE=1, FABRIC_MODE_RESTART=1, API at "
            << flags.vm.fm_address << ":6666\n"
            << "next: give the VM " << flags.vm.fm_address << " on network " << flags.vm.network
            << " (virsh net-update " << flags.vm.network << " add ip-dhcp-host \"<host mac='"
            << vm->mac << "' ip='" << flags.vm.fm_address << "'/>\" --live --config), virsh define "
            << domain
            << ", install fabricmanager.cfg in the VM, then run tessera with --fabric-manager "
            << flags.vm.fm_address << "\n";
}

}  // namespace

void AddFabricCommand(CLI::App& app) {
  CLI::App* fabric = app.add_subcommand(
      "fabric", "NVLink fabric partitions through NVIDIA Fabric Manager (shared NVSwitch mode)");
  fabric->require_subcommand(1);

  auto list_flags = std::make_shared<FabricFlags>();
  CLI::App* list = fabric->add_subcommand(
      "partitions",
      "Every supported partition: ID, status, GPU module IDs, NVLinks, PCI addresses");
  AddConnectionFlags(list, list_flags.get());
  list->add_option("--partition-table", list_flags->partition_table,
                   "Partition table (preset or file): checked against the fabric manager's, its "
                   "pci_addresses map modules where NVML cannot");
  list->add_option("--root", list_flags->root, "Host root whose GPUs are mapped")
      ->capture_default_str();
  list->add_option("--nvml", list_flags->nvml,
                   "NVML library for GPU module IDs (default: libnvidia-ml.so.1 when --root is /)");
  list->add_option("--format", list_flags->format, "Output format")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
  list->callback([list_flags] { ListPartitions(*list_flags); });

  auto activate_flags = std::make_shared<FabricFlags>();
  auto activate_id = std::make_shared<uint32_t>(0);
  CLI::App* activate = fabric->add_subcommand("activate", "Activate partition ID");
  AddConnectionFlags(activate, activate_flags.get());
  activate->add_option("ID", *activate_id, "Partition ID")->required();
  activate->callback([activate_flags, activate_id] {
    auto done = Connect(*activate_flags)->Activate(*activate_id);
    if (!done) FailAt(*activate_flags, done.error());
    std::cout << "partition " << *activate_id << " activated\n";
  });

  auto deactivate_flags = std::make_shared<FabricFlags>();
  auto deactivate_id = std::make_shared<uint32_t>(0);
  CLI::App* deactivate = fabric->add_subcommand("deactivate", "Deactivate partition ID");
  AddConnectionFlags(deactivate, deactivate_flags.get());
  deactivate->add_option("ID", *deactivate_id, "Partition ID")->required();
  deactivate->callback([deactivate_flags, deactivate_id] {
    auto done = Connect(*deactivate_flags)->Deactivate(*deactivate_id);
    if (!done) FailAt(*deactivate_flags, done.error());
    std::cout << "partition " << *deactivate_id << " deactivated\n";
  });

  auto set_flags = std::make_shared<FabricFlags>();
  auto set_ids = std::make_shared<std::vector<uint32_t>>();
  CLI::App* set = fabric->add_subcommand(
      "set-active",
      "Tell a restarted fabric manager (FABRIC_MODE_RESTART=1) which partitions are active; "
      "no ID sends the empty list");
  AddConnectionFlags(set, set_flags.get());
  set->add_option("ID", *set_ids, "Partition IDs that are active");
  set->callback([set_flags, set_ids] {
    if (auto valid = fabricmanager::CheckActivatedList(*set_ids); !valid) Fail(valid.error());
    auto done = Connect(*set_flags)->SetActivatedPartitions(*set_ids);
    if (!done) FailAt(*set_flags, done.error());
    std::cout << "active partition list sent (" << set_ids->size() << " partitions)\n";
  });

  auto vm_flags = std::make_shared<ServiceVmFlags>();
  CLI::App* vm = fabric->add_subcommand(
      "service-vm",
      "Write the libvirt domain of the Service VM that owns the NVSwitches, and its "
      "fabricmanager.cfg");
  vm->add_option("--root", vm_flags->root, "Host root to read")->capture_default_str();
  vm->add_option("--output-dir", vm_flags->output_dir, "Where <name>.xml and fabricmanager.cfg go")
      ->required();
  vm->add_option("--name", vm_flags->vm.name, "Domain name")->capture_default_str();
  vm->add_option("--vcpus", vm_flags->vm.vcpus, "Virtual CPUs")->capture_default_str();
  vm->add_option("--memory-mib", vm_flags->vm.memory_mib, "Memory")->capture_default_str();
  vm->add_option("--disk", vm_flags->vm.disk,
                 "The VM's system image (default /var/lib/libvirt/images/<name>.qcow2)");
  vm->add_option("--fm-address", vm_flags->vm.fm_address,
                 "The VM's IPv4 address: where its fabric manager's API listens")
      ->capture_default_str();
  vm->add_option("--network", vm_flags->vm.network, "libvirt network of the VM's NIC")
      ->capture_default_str();
  vm->callback([vm_flags] { WriteServiceVm(*vm_flags); });
}

}  // namespace tessera::cli

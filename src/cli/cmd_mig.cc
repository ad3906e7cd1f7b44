// `tessera mig apply`: make each GPU's MIG instances match a layout file. Wiring only: the
// inventory names the GPUs, the node lease file says which are leased, mig plans and applies.
#include <iostream>

#include "cli/commands.h"
#include "common/bounded_file.h"
#include "deviceplugin/deviceplugin.h"
#include "firmware/firmware.h"
#include "inventory/inventory.h"
#include "mig/mig.h"

namespace tessera::cli {
namespace {

struct ApplyOptions {
  std::string config;
  std::string select;
  std::vector<std::string> gpus;
  bool dry_run = false;
  std::vector<std::string> profiles;
  std::string root = "/";
  std::string nvml = "libnvidia-ml.so.1";
  std::string lease_file = "/run/tessera/leases.json";
};

std::string ReadSmallFile(const std::string& path, const char* what) {
  auto text = ReadBoundedFile(path, kMaxConfigFileBytes);
  if (!text) Fail(text.error().WithContext(what));
  return *text;
}

char HexDigit(unsigned value) {
  return "0123456789abcdef"[value & 15];
}

std::string DeviceId(const inventory::PciDevice& gpu) {
  std::string id;
  for (uint16_t v : {gpu.vendor_id, gpu.device_id}) {
    if (!id.empty()) id += ':';
    for (int shift = 12; shift >= 0; shift -= 4)
      id += HexDigit(v >> shift);
  }
  return id;
}

void Apply(const ApplyOptions& options) {
  auto layout = mig::ParseLayoutConfig(ReadSmallFile(options.config, "--config"), options.select);
  if (!layout) Fail(layout.error().WithContext(options.config));
  std::vector<mig::ProfileTable> tables = {mig::BuiltinH100Table()};
  for (const auto& path : options.profiles) {
    auto table = mig::ParseProfileTable(ReadSmallFile(path, "--profiles"));
    if (!table) Fail(table.error().WithContext(path));
    tables.insert(tables.begin(), std::move(*table));  // a given file wins over the built-in one
  }
  std::vector<std::string> only;
  for (const auto& text : options.gpus) {
    auto address = firmware::CanonicalPciAddress(text, "--gpu");
    if (!address) Fail(address.error());
    only.push_back(*address);
  }

  inventory::ReadOptions read;
  read.root = options.root;
  read.read_driver_files = false;
  auto inv = inventory::ReadInventory(read);
  if (!inv) Fail(inv.error());
  // GPU indices in a layout count NVIDIA GPUs in PCI order, as nvidia-smi numbers them.
  std::vector<const inventory::PciDevice*> gpus;
  for (const auto* gpu : inv->Gpus())
    if (gpu->is_nvidia() && gpu->driver == "nvidia") gpus.push_back(gpu);
  for (const auto& address : only) {
    if (std::none_of(gpus.begin(), gpus.end(),
                     [&](const auto* g) { return g->pci_address == address; })) {
      Fail(NotFound("--gpu " + address + ": no NVIDIA GPU there"));
    }
  }

  auto leases = deviceplugin::ReadLeaseFile(options.lease_file);
  if (!leases) Fail(leases.error());
  auto nvml = nvml::Library::Open(options.nvml);
  if (!nvml) Fail(nvml.error());

  std::optional<Error> first_error;
  auto report = [&](const std::string& pci, const Error& error) {
    std::cerr << "tessera: " << pci << ": " << error.message << "\n";
    if (!first_error) first_error = error;
  };
  for (size_t index = 0; index < gpus.size(); ++index) {
    const auto& gpu = *gpus[index];
    if (!only.empty() && std::find(only.begin(), only.end(), gpu.pci_address) == only.end())
      continue;
    std::optional<mig::LayoutEntry> wanted;
    for (const auto& entry : layout->entries) {
      if (entry.devices.Matches(static_cast<uint32_t>(index), gpu.pci_address)) {
        wanted = entry;
        break;
      }
    }
    if (!wanted) continue;  // the layout says nothing about this GPU: leave it alone
    const mig::ProfileTable* table = mig::TableForDevice(tables, DeviceId(gpu));
    if (!table) {
      report(gpu.pci_address, NotFound("no MIG profile table for " + DeviceId(gpu) + " (" +
                                       gpu.model + "); give one with --profiles"));
      continue;
    }
    auto state = mig::ReadGpuState(**nvml, gpu.pci_address);
    if (!state) {
      report(gpu.pci_address, state.error());
      continue;
    }
    auto plan = mig::PlanGpu(*state, wanted, *table);
    if (!plan) {
      report(gpu.pci_address, plan.error().WithContext(layout->name));
      continue;
    }
    for (const auto& line : mig::DescribePlan(*plan, *table)) {
      std::cout << gpu.pci_address << ": " << (options.dry_run && !plan->empty() ? "would " : "")
                << line << "\n";
    }
    if (plan->empty() || options.dry_run) continue;
    // Changing a GPU that is in use would pull slices from under running work.
    if (auto lease = leases->find(gpu.pci_address);
        lease != leases->end() && lease->second.state != deviceplugin::LeaseState::kFree) {
      report(gpu.pci_address,
             FailedPrecondition(std::string("refused: the GPU has a lease in state ") +
                                deviceplugin::LeaseStateName(lease->second.state) + " (" +
                                options.lease_file + ")"));
      continue;
    }
    auto handle = (*nvml)->GpuByPci(gpu.pci_address);
    auto processes =
        handle ? (*nvml)->RunningProcessCount(*handle) : Result<uint32_t>(handle.error());
    if (!processes) {
      report(gpu.pci_address, processes.error());
      continue;
    }
    if (*processes > 0) {
      report(gpu.pci_address, FailedPrecondition("refused: " + std::to_string(*processes) +
                                                 " process(es) are running on the GPU"));
      continue;
    }
    if (auto done = mig::ExecutePlan(**nvml, *plan); !done) {
      report(gpu.pci_address, done.error());
      continue;
    }
    std::cout << gpu.pci_address << ": applied\n";
  }
  if (first_error) throw CLI::RuntimeError(ExitCodeFor(*first_error));
}

}  // namespace

void AddMigCommand(CLI::App& app) {
  CLI::App* mig = app.add_subcommand("mig", "MIG layouts of NVIDIA GPUs");
  mig->require_subcommand(1);
  auto options = std::make_shared<ApplyOptions>();
  CLI::App* apply = mig->add_subcommand(
      "apply",
      "Make MIG instances match a layout file (mig-parted format): enable MIG, destroy "
      "unwanted instances, create wanted ones with placement");
  apply->add_option("--config", options->config, "Layout file (YAML)")->required();
  apply->add_option("--select", options->select,
                    "Named config in the file (when it holds several)");
  apply->add_option("--gpu", options->gpus, "Only these GPUs (PCI address, repeatable)");
  apply->add_flag("--dry-run", options->dry_run, "Print the plan, change nothing");
  apply->add_option(
      "--profiles", options->profiles,
      "Extra MIG profile table files (data/mig-profiles/*.yaml; H100 80GB is built in)");
  apply->add_option("--root", options->root, "Host root to read (a fixture tree in tests)")
      ->capture_default_str();
  apply->add_option("--nvml", options->nvml, "NVML library")->capture_default_str();
  apply
      ->add_option("--lease-file", options->lease_file, "Node lease file (leased GPUs are refused)")
      ->capture_default_str();
  apply->callback([options] { Apply(*options); });
}

}  // namespace tessera::cli

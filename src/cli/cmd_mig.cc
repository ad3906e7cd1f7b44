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

// The profile tables to plan with: each --profiles file, then the built-in H100 table.
std::vector<mig::ProfileTable> ReadProfileTables(const ApplyOptions& options) {
  std::vector<mig::ProfileTable> tables = {mig::BuiltinH100Table()};
  for (const auto& path : options.profiles) {
    auto table = mig::ParseProfileTable(ReadSmallFile(path, "--profiles"));
    if (!table) Fail(table.error().WithContext(path));
    tables.insert(tables.begin(), std::move(*table));  // a given file wins over the built-in one
  }
  return tables;
}

// The GPUs named with --gpu, canonical; empty means all.
std::vector<std::string> ReadOnlyGpus(const ApplyOptions& options) {
  std::vector<std::string> only;
  for (const auto& text : options.gpus) {
    auto address = firmware::CanonicalPciAddress(text, "--gpu");
    if (!address) Fail(address.error());
    only.push_back(*address);
  }
  return only;
}

// GPU indices in a layout count NVIDIA GPUs in PCI order, as nvidia-smi numbers them.
std::vector<const inventory::PciDevice*> NvidiaGpus(const inventory::Inventory& inv,
                                                    const std::vector<std::string>& only) {
  std::vector<const inventory::PciDevice*> gpus;
  for (const auto* gpu : inv.Gpus())
    if (gpu->is_nvidia() && gpu->driver == "nvidia") gpus.push_back(gpu);
  for (const auto& address : only) {
    if (std::none_of(gpus.begin(), gpus.end(),
                     [&](const auto* g) { return g->pci_address == address; })) {
      Fail(NotFound("--gpu " + address + ": no NVIDIA GPU there"));
    }
  }
  return gpus;
}

// The first layout entry that matches the GPU; none when the layout says nothing about it.
std::optional<mig::LayoutEntry> WantedLayout(const mig::LayoutConfig& layout, size_t index,
                                             const std::string& pci_address) {
  for (const auto& entry : layout.entries) {
    if (entry.devices.Matches(static_cast<uint32_t>(index), pci_address)) return entry;
  }
  return std::nullopt;
}

// What applying a layout to each GPU shares.
struct MigApplyContext {
  const ApplyOptions& options;
  const mig::LayoutConfig& layout;
  const std::vector<mig::ProfileTable>& tables;
  const deviceplugin::LeaseMap& leases;
  const nvml::Library& nvml;
};

// Changing a GPU that is in use would pull slices from under running work: refuses a GPU with
// a lease or with processes running.
Status CheckGpuIdle(const MigApplyContext& context, const std::string& pci_address) {
  if (auto lease = context.leases.find(pci_address);
      lease != context.leases.end() && lease->second.state != deviceplugin::LeaseState::kFree) {
    return FailedPrecondition(std::string("refused: the GPU has a lease in state ") +
                              deviceplugin::LeaseStateName(lease->second.state) + " (" +
                              context.options.lease_file + ")");
  }
  auto handle = context.nvml.GpuByPci(pci_address);
  auto processes =
      handle ? context.nvml.RunningProcessCount(*handle) : Result<uint32_t>(handle.error());
  if (!processes) return processes.error();
  if (*processes > 0) {
    return FailedPrecondition("refused: " + std::to_string(*processes) +
                              " process(es) are running on the GPU");
  }
  return Ok();
}

// Plans the GPU's MIG instances against `wanted`, prints the plan and, unless it is a dry run
// or there is nothing to do, carries it out on an idle GPU.
Status ApplyToGpu(const MigApplyContext& context, const inventory::PciDevice& gpu,
                  const mig::LayoutEntry& wanted) {
  const mig::ProfileTable* table = mig::TableForDevice(context.tables, DeviceId(gpu));
  if (!table) {
    return NotFound("no MIG profile table for " + DeviceId(gpu) + " (" + gpu.model +
                    "); give one with --profiles");
  }
  auto state = mig::ReadGpuState(context.nvml, gpu.pci_address);
  if (!state) return state.error();
  auto plan = mig::PlanGpu(*state, wanted, *table);
  if (!plan) return plan.error().WithContext(context.layout.name);
  const bool dry_run = context.options.dry_run;
  for (const auto& line : mig::DescribePlan(*plan, *table)) {
    std::cout << gpu.pci_address << ": " << (dry_run && !plan->empty() ? "would " : "") << line
              << "\n";
  }
  if (plan->empty() || dry_run) return Ok();
  if (auto idle = CheckGpuIdle(context, gpu.pci_address); !idle) return idle;
  if (auto done = mig::ExecutePlan(context.nvml, *plan); !done) return done;
  std::cout << gpu.pci_address << ": applied\n";
  return Ok();
}

void Apply(const ApplyOptions& options) {
  auto layout = mig::ParseLayoutConfig(ReadSmallFile(options.config, "--config"), options.select);
  if (!layout) Fail(layout.error().WithContext(options.config));
  std::vector<mig::ProfileTable> tables = ReadProfileTables(options);
  std::vector<std::string> only = ReadOnlyGpus(options);

  inventory::ReadOptions read;
  read.root = options.root;
  read.read_driver_files = false;
  auto inv = inventory::ReadInventory(read);
  if (!inv) Fail(inv.error());
  std::vector<const inventory::PciDevice*> gpus = NvidiaGpus(*inv, only);

  auto leases = deviceplugin::ReadLeaseFile(options.lease_file);
  if (!leases) Fail(leases.error());
  auto nvml = nvml::Library::Open(options.nvml);
  if (!nvml) Fail(nvml.error());

  const MigApplyContext context{options, *layout, tables, *leases, **nvml};
  std::optional<Error> first_error;
  for (size_t index = 0; index < gpus.size(); ++index) {
    const auto& gpu = *gpus[index];
    if (!only.empty() && std::find(only.begin(), only.end(), gpu.pci_address) == only.end())
      continue;
    auto wanted = WantedLayout(*layout, index, gpu.pci_address);
    if (!wanted) continue;  // the layout says nothing about this GPU: leave it alone
    if (auto applied = ApplyToGpu(context, gpu, *wanted); !applied) {
      std::cerr << "tessera: " << gpu.pci_address << ": " << applied.error().message << "\n";
      if (!first_error) first_error = applied.error();
    }
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

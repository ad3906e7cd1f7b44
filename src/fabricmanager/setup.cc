// Opening a node's fabric: connection, first contact, module map, activator.
#include <spdlog/spdlog.h>

#include "common/bounded_file.h"
#include "fabricmanager/fabricmanager.h"
#include "nvml/nvml.h"

namespace tessera::fabricmanager {

Result<topology::PartitionTable> LoadPartitionTable(const std::string& preset_or_file) {
  if (auto preset = topology::PresetTable(preset_or_file)) return preset;
  auto text = ReadBoundedFile(preset_or_file, kMaxConfigFileBytes);
  if (!text) {
    return text.error().WithContext("partition table " + preset_or_file +
                                    " (neither a preset nor a readable file)");
  }
  return topology::ParsePartitionTableFile(preset_or_file, *text);
}

Result<std::map<std::string, int>> NvmlModuleIds(const std::string& library,
                                                 const std::vector<std::string>& gpus) {
  auto nvml = nvml::Library::Open(library);
  if (!nvml) return nvml.error();
  std::map<std::string, int> out;
  for (const auto& pci : gpus) {
    auto gpu = (*nvml)->GpuByPci(pci);
    if (!gpu) return gpu.error();
    auto module = (*nvml)->ModuleId(*gpu);
    if (!module) return module.error().WithContext(pci);
    if (*module) out[pci] = static_cast<int>(**module);
  }
  return out;
}

Result<std::unique_ptr<FabricManager>> ConnectNvfmAt(std::string_view address,
                                                     const std::string& library,
                                                     unsigned deadline_ms) {
  auto parsed = ParseFabricAddress(address);
  if (!parsed) return parsed.error();
  NvfmOptions options;
  options.library = library;
  options.timeout_ms = deadline_ms;
  options.address = *parsed;
  auto fabric = ConnectNvfm(options);
  if (!fabric) return fabric.error().WithContext("fabric manager at " + parsed->ToString());
  return fabric;
}

Result<ModuleMap> MapHostModules(const std::vector<SupportedPartition>& partitions,
                                 const std::string& table_spec,
                                 const std::vector<std::string>& host_gpus,
                                 const std::string& nvml_library) {
  ModuleSources sources;
  sources.partitions = partitions;
  sources.host_gpus = host_gpus;
  if (!table_spec.empty()) {
    auto table = LoadPartitionTable(table_spec);
    if (!table) return table.error().WithContext("--partition-table");
    sources.table = std::move(*table);
  }
  if (!nvml_library.empty() && !host_gpus.empty()) {
    // No driver on this host (VM isolation): the table is the only map.
    if (auto modules = NvmlModuleIds(nvml_library, host_gpus))
      sources.nvml_modules = std::move(*modules);
  }
  return MapModules(sources);
}

Result<Fabric> OpenFabric(FabricSetup setup) {
  const std::string where = "fabric manager at " + setup.nvfm.address.ToString();
  auto connect = [nvfm = setup.nvfm] { return ConnectNvfm(nvfm); };
  auto fabric = connect();
  if (!fabric) return fabric.error().WithContext(where);
  auto listed = (*fabric)->ListPartitions();
  if (!listed && listed.error().category == ErrorCategory::kUnavailable &&
      !IsNoAnswer(listed.error())) {
    // Restarted while we were down and waiting for the active list: the ledger says what was
    // active. Until it is told, it answers nothing else (and it exits after 60 s).
    std::vector<uint32_t> ids;
    auto text = ReadBoundedFile(setup.ledger_path, kMaxStateFileBytes);
    if (text) {
      auto parsed = LedgerPartitionIds(*text);
      if (!parsed) return parsed.error().WithContext(setup.ledger_path);
      ids = std::move(*parsed);
    } else if (text.error().category != ErrorCategory::kNotFound) {
      return text.error();
    }
    if (auto sent = (*fabric)->SetActivatedPartitions(ids); !sent) {
      return sent.error().WithContext(where + " (" + listed.error().message + ")");
    }
    spdlog::warn("{}: it waited for the active partition list ({}); sent {} partitions", where,
                 listed.error().message, ids.size());
    listed = (*fabric)->ListPartitions();
  }
  if (!listed) return listed.error().WithContext(where);
  if (auto usable = ValidateListing(*listed, setup.table ? setup.table->module_count : 0); !usable)
    return usable.error().WithContext(where);

  ModuleSources sources;
  sources.partitions = *listed;
  sources.table = setup.table;
  sources.host_gpus = setup.host_gpus;
  if (!setup.nvml_library.empty() && !setup.host_gpus.empty()) {
    auto modules = NvmlModuleIds(setup.nvml_library, setup.host_gpus);
    if (modules) {
      sources.nvml_modules = std::move(*modules);
    } else {
      // VM-isolation hosts have no driver: the table's pci_addresses are the map there.
      spdlog::info("NVML module IDs: {}; the partition table's pci_addresses are used",
                   modules.error().message);
    }
  }
  const std::string board = setup.table ? setup.table->board : "fabric";
  auto table = PlacementTable(sources, board);
  if (!table) return table.error().WithContext(where);

  ActivatorOptions options;
  options.connect = connect;
  options.connected = std::move(*fabric);
  options.table = *table;
  options.state_path = setup.ledger_path;
  options.poll_interval = setup.poll_interval;
  auto activator = PartitionActivator::Open(std::move(options));
  if (!activator) return activator.error();
  return Fabric{std::move(*activator), std::move(*table)};
}

}  // namespace tessera::fabricmanager

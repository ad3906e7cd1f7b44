// Module ID -> PCI address from the fabric manager, NVML and the operator's table. Pure.
#include <algorithm>
#include <set>

#include "fabricmanager/fabricmanager.h"

namespace tessera::fabricmanager {
namespace {

using Partitions = std::map<uint32_t, std::vector<int>>;

Partitions ById(const std::vector<SupportedPartition>& partitions) {
  Partitions out;
  for (const auto& p : partitions)
    out[p.id] = p.modules();
  return out;
}

Status SameAsFabric(const topology::PartitionTable& table, const Partitions& fabric) {
  const std::string name = "partition table " + (table.board.empty() ? "" : table.board + " ");
  for (const auto& partition : table.partitions) {
    auto it = fabric.find(partition.id);
    if (it == fabric.end()) {
      return InvalidArgument(name + "has partition " + std::to_string(partition.id) + " " +
                             ModuleSet(partition.modules) +
                             ", which the fabric manager does not report");
    }
    if (it->second != partition.modules) {
      return InvalidArgument(name + "says partition " + std::to_string(partition.id) + " is " +
                             ModuleSet(partition.modules) + ", the fabric manager reports " +
                             ModuleSet(it->second));
    }
  }
  for (const auto& [id, modules] : fabric) {
    if (!table.Find(id)) {
      return InvalidArgument(name + "lacks partition " + std::to_string(id) + " " +
                             ModuleSet(modules) + " that the fabric manager reports");
    }
  }
  return Ok();
}

struct Candidate {
  const char* source;
  std::string address;
};

}  // namespace

Result<ModuleMap> MapModules(const ModuleSources& sources) {
  if (sources.partitions.empty())
    return FailedPrecondition("the fabric manager reports no partitions");
  const Partitions fabric = ById(sources.partitions);
  std::set<int> modules;
  for (const auto& [id, members] : fabric)
    modules.insert(members.begin(), members.end());
  if (sources.table) {
    if (auto same = SameAsFabric(*sources.table, fabric); !same) return same.error();
  }

  std::map<int, std::vector<Candidate>> candidates;
  for (const auto& partition : sources.partitions) {
    for (const auto& gpu : partition.gpus) {
      if (gpu.pci_address.empty()) continue;  // zeroed on H100 and later
      auto& list = candidates[gpu.module_id];
      if (list.empty() || list.front().address != gpu.pci_address) {
        if (!list.empty()) {
          return InvalidArgument("module " + std::to_string(gpu.module_id) +
                                 ": the fabric manager reports both " + list.front().address +
                                 " and " + gpu.pci_address);
        }
        list.push_back({"the fabric manager", gpu.pci_address});
      }
    }
  }
  std::map<int, std::string> nvml_by_module;
  for (const auto& [address, module] : sources.nvml_modules) {
    if (!modules.count(module)) {
      return InvalidArgument("NVML reports module ID " + std::to_string(module) + " for " +
                             address + ", which no fabric partition has");
    }
    auto [it, fresh] = nvml_by_module.emplace(module, address);
    if (!fresh) {
      return InvalidArgument("NVML reports module ID " + std::to_string(module) + " for both " +
                             it->second + " and " + address);
    }
    candidates[module].push_back({"NVML", address});
  }
  if (sources.table) {
    for (const auto& [module, address] : sources.table->pci_addresses) {
      if (!modules.count(module)) {
        return InvalidArgument("partition table pci_addresses: module " + std::to_string(module) +
                               " is in no fabric partition");
      }
      candidates[module].push_back({"the partition table", address});
    }
  }

  ModuleMap map;
  std::map<std::string, int> module_of_address;
  const std::set<std::string> host(sources.host_gpus.begin(), sources.host_gpus.end());
  for (int module : modules) {
    auto it = candidates.find(module);
    if (it == candidates.end()) {
      map.unmapped.push_back(module);
      continue;
    }
    const auto& list = it->second;
    for (const auto& other : list) {
      if (other.address != list.front().address) {
        return InvalidArgument("module " + std::to_string(module) + ": " + list.front().source +
                               " says " + list.front().address + ", " + other.source + " says " +
                               other.address);
      }
    }
    const std::string& address = list.front().address;
    auto [seen, fresh] = module_of_address.emplace(address, module);
    if (!fresh) {
      return InvalidArgument(address + " is both module " + std::to_string(seen->second) +
                             " and module " + std::to_string(module));
    }
    if (!host.empty() && !host.count(address)) {
      return InvalidArgument("module " + std::to_string(module) + ": " + list.front().source +
                             " places it at " + address + ", which is no GPU of this host");
    }
    map.pci_by_module[module] = address;
  }
  return map;
}

Result<topology::PartitionTable> PlacementTable(const ModuleSources& sources,
                                                const std::string& board) {
  auto map = MapModules(sources);
  if (!map) return map.error();
  if (!map->unmapped.empty()) {
    std::vector<int> unmapped = map->unmapped;
    return FailedPrecondition(
        "GPU modules " + ModuleSet(unmapped) +
        " have no PCI address: NVML reports no module ID for them (is the NVIDIA driver loaded "
        "on this host?) and --partition-table gives no pci_addresses for them");
  }
  std::set<std::string> mapped;
  for (const auto& [module, address] : map->pci_by_module)
    mapped.insert(address);
  for (const auto& gpu : sources.host_gpus) {
    if (!mapped.count(gpu)) {
      return FailedPrecondition("GPU " + gpu +
                                " is in no fabric partition: no source gives it a module ID");
    }
  }
  std::vector<SupportedPartition> bare = sources.partitions;
  for (auto& partition : bare)
    for (auto& gpu : partition.gpus)
      gpu.pci_address.clear();
  auto table = TableFromPartitions(bare, board);
  if (!table) return table.error();
  table->pci_addresses = map->pci_by_module;
  if (auto valid = topology::ValidatePartitionTable(*table); !valid) return valid.error();
  return table;
}

}  // namespace tessera::fabricmanager

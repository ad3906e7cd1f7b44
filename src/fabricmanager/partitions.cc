// What a fabric manager reports, as values: partition helpers and the table they make.
#include <algorithm>

#include "fabricmanager/fabricmanager.h"

namespace tessera::fabricmanager {

int SupportedPartition::nvlinks() const {
  int sum = 0;
  for (const auto& gpu : gpus)
    sum += gpu.nvlinks_available;
  return sum;
}

std::vector<int> SupportedPartition::modules() const {
  std::vector<int> out;
  for (const auto& gpu : gpus)
    out.push_back(gpu.module_id);
  std::sort(out.begin(), out.end());
  return out;
}

std::string ModuleSet(const std::vector<int>& modules) {
  std::string out = "{";
  for (size_t i = 0; i < modules.size(); ++i)
    out += (i ? "," : "") + std::to_string(modules[i]);
  return out + "}";
}

Result<topology::PartitionTable> TableFromPartitions(
    const std::vector<SupportedPartition>& partitions, const std::string& board) {
  if (auto usable = ValidateListing(partitions); !usable) return usable.error();
  topology::PartitionTable table;
  table.board = board;
  for (const auto& partition : partitions) {
    topology::FabricPartition p;
    p.id = partition.id;
    for (const auto& gpu : partition.gpus) {
      p.modules.push_back(gpu.module_id);
      table.module_count = std::max(table.module_count, gpu.module_id);
      if (!gpu.pci_address.empty()) {
        auto [it, fresh] = table.pci_addresses.emplace(gpu.module_id, gpu.pci_address);
        if (!fresh && it->second != gpu.pci_address) {
          return InvalidArgument("fabric manager reports module " + std::to_string(gpu.module_id) +
                                 " at both " + it->second + " and " + gpu.pci_address);
        }
      }
    }
    std::sort(p.modules.begin(), p.modules.end());
    table.partitions.push_back(std::move(p));
  }
  if (auto valid = topology::ValidatePartitionTable(table); !valid) {
    return valid.error().WithContext("partitions reported by the fabric manager");
  }
  return table;
}

}  // namespace tessera::fabricmanager

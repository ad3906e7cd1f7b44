// The NVLink fabric partition table named in the config: a preset or a file, plus this host's
// module -> PCI address map.
#include "common/bounded_file.h"
#include "deviceplugin/deviceplugin.h"

namespace tessera::deviceplugin {

Result<std::optional<topology::PartitionTable>> LoadPartitionTable(const TopologyConfig& config) {
  if (config.partition_table.empty()) {
    if (!config.modules.empty()) {
      return InvalidArgument("topology.modules given without topology.partitionTable");
    }
    return std::optional<topology::PartitionTable>();
  }
  topology::PartitionTable table;
  auto preset = topology::PresetTable(config.partition_table);
  if (preset) {
    table = std::move(*preset);
  } else {
    auto text = ReadBoundedFile(config.partition_table, kMaxConfigFileBytes);
    if (!text) return text.error().WithContext("topology.partitionTable");
    auto parsed = topology::ParsePartitionTableFile(config.partition_table, *text);
    if (!parsed) return parsed.error();
    table = std::move(*parsed);
  }
  for (const auto& [module, pci] : config.modules)
    table.pci_addresses[module] = pci;
  if (auto s = topology::ValidatePartitionTable(table); !s) {
    return s.error().WithContext("topology");
  }
  return std::optional<topology::PartitionTable>(std::move(table));
}

}  // namespace tessera::deviceplugin

// An operator's partition table (--partition-table, YAML or JSON by the first byte) as the fabric
// code loads it: checked against what an HGX H100 fabric manager reports and merged with NVML's
// module IDs into the placement table, whose every partition a GPU set must resolve to.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fabricmanager/fabricmanager.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  using namespace tessera;
  using namespace tessera::fabricmanager;
  std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  auto table = topology::ParsePartitionTableFile((data[0] & 1) ? "t.json" : "t.yaml", text);
  if (!table) return 0;
  ModuleSources sources;
  for (const auto& p : topology::HgxH100Table().partitions) {
    SupportedPartition partition{p.id, false, {}};
    for (int m : p.modules)
      partition.gpus.push_back({m, "", "", 18, 18});
    sources.partitions.push_back(partition);
  }
  sources.table = *table;
  // NVML knows some modules (by the second byte), the table may know the rest.
  for (int m = 1; m <= 8; ++m) {
    const std::string address = "0000:1" + std::to_string(m) + ":00.0";
    sources.host_gpus.push_back(address);
    if (data[0] & (1 << m % 8)) sources.nvml_modules[address] = m;
  }
  auto placement = PlacementTable(sources, table->board);
  if (!placement) return 0;
  if (!topology::ValidatePartitionTable(*placement).ok()) __builtin_trap();
  auto planner = topology::PartitionPlanner::Create(*placement);
  if (!planner) __builtin_trap();
  PartitionLedger ledger(*planner);
  for (const auto& partition : placement->partitions) {
    std::vector<std::string> gpus;
    for (int m : partition.modules)
      gpus.push_back(placement->pci_addresses.at(m));
    auto id = ledger.PartitionOf(gpus);
    if (!id || *id != partition.id) __builtin_trap();
  }
  return 0;
}

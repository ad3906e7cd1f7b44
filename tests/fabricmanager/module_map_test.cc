// Module ID -> PCI address from the fabric manager, NVML and the operator's table.
#include <gtest/gtest.h>

#include "fabricmanager/fabricmanager.h"

namespace tessera::fabricmanager {
namespace {

// What an H100 fabric manager reports: the HGX partitions, empty UUIDs, zeroed bus IDs.
std::vector<SupportedPartition> H100Partitions() {
  std::vector<SupportedPartition> out;
  for (const auto& p : topology::HgxH100Table().partitions) {
    SupportedPartition partition{p.id, false, {}};
    for (int m : p.modules)
      partition.gpus.push_back({m, "", "", p.modules.size() > 1 ? 18 : 0, 18});
    out.push_back(partition);
  }
  return out;
}

std::string Gpu(int bus) {
  char address[16];
  std::snprintf(address, sizeof address, "0000:%02x:00.0", bus);
  return address;
}

// Eight GPUs at buses 0x18.. in PCI order with module IDs in another order (as on real boards).
const int kModuleOfGpu[8] = {3, 1, 4, 2, 7, 5, 8, 6};

ModuleSources WithNvml() {
  ModuleSources sources;
  sources.partitions = H100Partitions();
  for (int i = 0; i < 8; ++i) {
    sources.host_gpus.push_back(Gpu(0x18 + i));
    sources.nvml_modules[Gpu(0x18 + i)] = kModuleOfGpu[i];
  }
  return sources;
}

TEST(ModuleMap, NvmlModuleIdsPlaceEveryModule) {
  auto map = MapModules(WithNvml());
  ASSERT_TRUE(map.ok()) << map.error().message;
  EXPECT_TRUE(map->unmapped.empty());
  EXPECT_EQ(map->pci_by_module.at(1), Gpu(0x19));
  EXPECT_EQ(map->pci_by_module.at(3), Gpu(0x18));
  auto table = PlacementTable(WithNvml(), "hgx-h100-8gpu");
  ASSERT_TRUE(table.ok()) << table.error().message;
  EXPECT_EQ(table->partitions, topology::HgxH100Table().partitions);
  EXPECT_EQ(table->pci_addresses.size(), 8u);
}

TEST(ModuleMap, TheTablesAddressesServeWhereNvmlCannot) {
  ModuleSources sources;
  sources.partitions = H100Partitions();
  sources.table = topology::HgxH100Table();
  for (int i = 0; i < 8; ++i) {
    sources.host_gpus.push_back(Gpu(0x18 + i));
    sources.table->pci_addresses[kModuleOfGpu[i]] = Gpu(0x18 + i);
  }
  auto table = PlacementTable(sources, sources.table->board);
  ASSERT_TRUE(table.ok()) << table.error().message;
  EXPECT_EQ(table->board, "hgx-h100-8gpu");
  EXPECT_EQ(table->pci_addresses.at(2), Gpu(0x1b));
}

TEST(ModuleMap, SourcesThatDisagreeAreAnErrorNotAGuess) {
  auto sources = WithNvml();
  sources.table = topology::HgxH100Table();
  sources.table->pci_addresses[1] = Gpu(0x18);  // NVML says module 1 is 0x19
  auto map = MapModules(sources);
  ASSERT_FALSE(map.ok());
  EXPECT_EQ(map.error().message,
            "module 1: NVML says 0000:19:00.0, the partition table says 0000:18:00.0");

  auto fabric = WithNvml();  // an older fabric manager that reports bus IDs
  fabric.partitions[7].gpus[0].pci_address = Gpu(0x20);  // partition 7 = module 1
  EXPECT_NE(MapModules(fabric).error().message.find("the fabric manager says 0000:20:00.0"),
            std::string::npos);

  auto twice = WithNvml();
  twice.nvml_modules[Gpu(0x1f)] = 3;
  EXPECT_NE(MapModules(twice).error().message.find("NVML reports module ID 3 for both"),
            std::string::npos);

  auto unknown = WithNvml();
  unknown.nvml_modules[Gpu(0x1f)] = 9;
  EXPECT_NE(MapModules(unknown).error().message.find("which no fabric partition has"),
            std::string::npos);

  auto elsewhere = WithNvml();
  elsewhere.host_gpus.pop_back();
  EXPECT_NE(MapModules(elsewhere).error().message.find("which is no GPU of this host"),
            std::string::npos);
}

TEST(ModuleMap, ATableWhosePartitionsDifferIsRefused) {
  auto sources = WithNvml();
  sources.table = topology::HgxH100Table();
  sources.table->partitions[3].modules = {1, 2};
  auto map = MapModules(sources);
  ASSERT_FALSE(map.ok());
  EXPECT_NE(map.error().message.find("says partition 3 is {1,2}, the fabric manager reports {1,3}"),
            std::string::npos)
      << map.error().message;
  sources.table = topology::HgxH100Table();
  sources.table->partitions.pop_back();
  EXPECT_NE(MapModules(sources).error().message.find("lacks partition 14"), std::string::npos);
}

TEST(ModuleMap, ListingToleratesGapsPlacementDoesNot) {
  auto sources = WithNvml();
  sources.nvml_modules.erase(Gpu(0x18));  // module 3 unknown
  auto map = MapModules(sources);
  ASSERT_TRUE(map.ok());
  EXPECT_EQ(map->unmapped, (std::vector<int>{3}));
  auto table = PlacementTable(sources, "b");
  ASSERT_FALSE(table.ok());
  EXPECT_EQ(table.error().category, ErrorCategory::kFailedPrecondition);
  EXPECT_NE(table.error().message.find("GPU modules {3} have no PCI address"), std::string::npos);
}

}  // namespace
}  // namespace tessera::fabricmanager

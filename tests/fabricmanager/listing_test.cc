#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "fabricmanager/operator_tools.h"

namespace tessera::fabricmanager {
namespace {

std::vector<SupportedPartition> Partitions() {
  return {
      {0, false, {{2, "", "", 18, 18}, {1, "", "", 18, 18}}},
      {7, true, {{1, "", "", 0, 18}}},
      {8, false, {{2, "", "", 0, 18}}},
  };
}

ModuleMap Map() {
  ModuleMap map;
  map.pci_by_module[1] = "0000:2a:00.0";
  map.unmapped = {2};
  return map;
}

TEST(PartitionListing, TableReadsLikeTheFabricManagersDocs) {
  EXPECT_EQ(PartitionsTable(Partitions(), Map()),
            "PARTITION ID  STATUS    GPUs  NVLINKS  GPU PHYSICAL IDs  PCI ADDRESSES\n"
            "0             Inactive  2     36       1,2               0000:2a:00.0,-\n"
            "7             Active    1     0        1                 0000:2a:00.0\n"
            "8             Inactive  1     0        2                 -\n");
}

TEST(PartitionListing, JsonHasIdsStatusNvlinksAndGpus) {
  auto doc = nlohmann::json::parse(PartitionsJson(Partitions(), Map()));
  ASSERT_EQ(doc["partitions"].size(), 3u);
  const auto& first = doc["partitions"][0];
  EXPECT_EQ(first["id"], 0);
  EXPECT_EQ(first["active"], false);
  EXPECT_EQ(first["nvlinks"], 36);
  EXPECT_EQ(first["gpus"][0], (nlohmann::json{{"module", 1}, {"pci_address", "0000:2a:00.0"}}));
  EXPECT_TRUE(first["gpus"][1]["pci_address"].is_null());
  EXPECT_EQ(doc["partitions"][1]["active"], true);
}

}  // namespace
}  // namespace tessera::fabricmanager

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "fabricmanager/operator_tools.h"
#include "topology/topology.h"

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

// The HGX H100 8-GPU list as the fabric manager reports it, module by module.
std::vector<SupportedPartition> Hgx() {
  std::vector<SupportedPartition> out;
  for (const auto& p : topology::HgxH100Table().partitions) {
    SupportedPartition partition{p.id, false, {}};
    for (int m : p.modules)
      partition.gpus.push_back({m, "", "", 18, 18});
    out.push_back(std::move(partition));
  }
  return out;
}

std::string Defects(const std::vector<SupportedPartition>& partitions, int board = 0) {
  std::string out;
  for (const auto& defect : ListingDefects(partitions, board))
    out += defect + "\n";
  return out;
}

TEST(ListingValidation, TheHgxListIsUsable) {
  EXPECT_EQ(Defects(Hgx()), "");
  EXPECT_EQ(Defects(Hgx(), 8), "");
  EXPECT_TRUE(ValidateListing(Hgx(), 8).ok());
  // And what serve builds its table from agrees.
  EXPECT_TRUE(TableFromPartitions(Hgx(), "hgx").ok());
}

TEST(ListingValidation, EachDefectIsNamed) {
  auto duplicate_id = Hgx();
  duplicate_id[8].id = 7;  // {2} reported as partition 7 too
  EXPECT_EQ(Defects(duplicate_id), "partition ID 7 is listed twice (entries 8 and 9)\n");

  auto duplicate_module = Hgx();
  duplicate_module[3].gpus[1].module_id = 1;  // {1,1}
  EXPECT_EQ(Defects(duplicate_module), "partition 3: module 1 is listed twice\n");

  auto unknown = Hgx();
  unknown[7].gpus[0].module_id = 0;
  unknown[8].gpus[0].module_id = 17;
  EXPECT_EQ(Defects(unknown),
            "partition 7: unknown module ID 0 (modules 1..16)\n"
            "partition 8: unknown module ID 17 (modules 1..16)\n");
  // On an 8-module board (a partition table names it), module 9 is nobody's.
  auto ninth = Hgx();
  ninth[14].gpus[0].module_id = 9;
  EXPECT_EQ(Defects(ninth, 8), "partition 14: unknown module ID 9 (modules 1..8)\n");
  EXPECT_EQ(Defects(ninth), "");  // 9 is a module of some 16-GPU board

  // A 16-GPU partition where the board has 8 modules.
  auto sixteen = Hgx();
  sixteen[0].gpus.clear();
  for (int m = 1; m <= 16; ++m)
    sixteen[0].gpus.push_back({m, "", "", 18, 18});
  const std::string on_eight = Defects(sixteen, 8);
  EXPECT_NE(on_eight.find("partition 0 has 16 GPUs, more than the board's 8 modules\n"),
            std::string::npos)
      << on_eight;
  EXPECT_NE(on_eight.find("partition 0: unknown module ID 9 (modules 1..8)\n"), std::string::npos);

  auto empty = Hgx();
  empty[2].gpus.clear();
  EXPECT_EQ(Defects(empty), "partition 2 has no GPUs\n");
  EXPECT_EQ(Defects({}), "the fabric manager reports no partitions\n");

  auto same = Hgx();
  same[1].id = 40;
  same.push_back(same[1]);
  same.back().id = 41;
  EXPECT_EQ(Defects(same), "partitions 40 and 41 have the same GPUs {1,2,3,4}\n");
}

TEST(ListingValidation, BusIdsAreQuotedAsExcerptsAndTheCountIsBounded) {
  auto hostile = Hgx();
  hostile[7].gpus[0].pci_address = "0000:18:00.0\x1b[2J\nfake line";
  const std::string defects = Defects(hostile);
  EXPECT_EQ(defects,
            "partition 7: module 1 has the bus ID \"0000:18:00.0?[2J?fake line\", which is no PCI "
            "address\n");
  std::vector<SupportedPartition> many;
  for (uint32_t id = 0; id < 40; ++id)
    many.push_back({1, false, {{static_cast<int>(id % 8) + 1, "", "", 0, 18}}});
  auto listed = ListingDefects(many);
  ASSERT_EQ(listed.size(), 17u);
  EXPECT_EQ(listed.back(), "and 23 more defects");  // 39 repeats of ID 1
  auto status = ValidateListing(many);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.error().category, ErrorCategory::kInvalidArgument);
  EXPECT_EQ(status.error().message.rfind("the fabric manager's partition list is unusable: ", 0),
            0u);
  // Serve's table is refused for the same reasons.
  auto table = TableFromPartitions(hostile, "hgx");
  ASSERT_FALSE(table.ok());
  EXPECT_NE(table.error().message.find("which is no PCI address"), std::string::npos);
}

TEST(ListingValidation, AnActiveListNamesEachPartitionOnce) {
  EXPECT_TRUE(CheckActivatedList({}).ok());
  EXPECT_TRUE(CheckActivatedList({1, 5}).ok());
  auto twice = CheckActivatedList({1, 1, 1});
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.error().message,
            "active partition list: partition 1 is given twice; each active partition is named "
            "once");
  EXPECT_FALSE(CheckActivatedList(std::vector<uint32_t>(65, 0)).ok());
}

}  // namespace
}  // namespace tessera::fabricmanager

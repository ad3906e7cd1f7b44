#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>

#include "common/atomic_file.h"
#include "fabricmanager/fabricmanager.h"

namespace tessera::fabricmanager {
namespace {

class FileFabricManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = std::string(TESSERA_BINARY_DIR) + "/fm-XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    path_ = dir_ + "/active.json";
  }
  void TearDown() override { std::system(("rm -rf '" + dir_ + "'").c_str()); }

  static topology::PartitionTable Table() {
    topology::PartitionTable table = topology::HgxH100Table();
    for (int m = 1; m <= 8; ++m) {
      char address[16];
      std::snprintf(address, sizeof address, "0000:%02x:00.0", 0x10 * m);
      table.pci_addresses[m] = address;
    }
    return table;
  }

  std::unique_ptr<FabricManager> Open() {
    auto manager = OpenFileFabricManager(Table(), path_);
    EXPECT_TRUE(manager.ok()) << manager.error().message;
    return manager.ok() ? std::move(*manager) : nullptr;
  }

  static std::vector<uint32_t> ActiveIds(FabricManager& manager) {
    auto listed = manager.ListPartitions();
    EXPECT_TRUE(listed.ok());
    std::vector<uint32_t> ids;
    for (const auto& p : *listed) {
      if (p.active) ids.push_back(p.id);
    }
    return ids;
  }

  std::string dir_, path_;
};

TEST_F(FileFabricManagerTest, MissingStateFileMeansNothingActive) {
  auto manager = Open();
  auto listed = manager->ListPartitions();
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 15u);
  EXPECT_TRUE(ActiveIds(*manager).empty());
  EXPECT_EQ((*listed)[3].gpus[1].module_id, 3);
  EXPECT_EQ((*listed)[3].gpus[1].pci_address, "0000:30:00.0");
}

TEST_F(FileFabricManagerTest, ActivationsPersistAcrossInstances) {
  auto first = Open();
  ASSERT_TRUE(first->Activate(3).ok());
  ASSERT_TRUE(first->Activate(2).ok());
  auto second = Open();
  EXPECT_EQ(ActiveIds(*second), (std::vector<uint32_t>{2, 3}));
  ASSERT_TRUE(second->Deactivate(3).ok());
  EXPECT_EQ(ActiveIds(*first), (std::vector<uint32_t>{2}));
  auto text = ReadWholeFile(path_);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "{\"active\":[2]}\n");
}

TEST_F(FileFabricManagerTest, OverlappingActivationIsRefusedAndLeavesTheFileAlone) {
  auto manager = Open();
  ASSERT_TRUE(manager->Activate(1).ok());  // {1,2,3,4}
  auto refused = manager->Activate(4);     // {2,4}
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().category, ErrorCategory::kFailedPrecondition);
  EXPECT_NE(refused.error().message.find("overlaps active partition 1"), std::string::npos);
  EXPECT_EQ(ActiveIds(*manager), (std::vector<uint32_t>{1}));
  EXPECT_FALSE(manager->Deactivate(4).ok());
}

TEST_F(FileFabricManagerTest, SetActivatedPartitionsReplacesTheList) {
  auto manager = Open();
  ASSERT_TRUE(manager->Activate(0).ok());
  ASSERT_TRUE(manager->SetActivatedPartitions({5, 6, 3}).ok());
  EXPECT_EQ(ActiveIds(*manager), (std::vector<uint32_t>{3, 5, 6}));
  EXPECT_FALSE(manager->SetActivatedPartitions({1, 3}).ok());
  EXPECT_EQ(ActiveIds(*manager), (std::vector<uint32_t>{3, 5, 6}));
  ASSERT_TRUE(manager->SetActivatedPartitions({}).ok());
  EXPECT_TRUE(ActiveIds(*manager).empty());
}

TEST_F(FileFabricManagerTest, CorruptOrInconsistentStateIsRefusedWithThePath) {
  std::ofstream(path_) << "{\"active\": [";
  auto corrupt = OpenFileFabricManager(Table(), path_);
  ASSERT_FALSE(corrupt.ok());
  EXPECT_NE(corrupt.error().message.find(path_), std::string::npos);
  std::ofstream(path_, std::ios::trunc) << "{\"active\": [1, 3]}";
  auto overlapping = OpenFileFabricManager(Table(), path_);
  ASSERT_FALSE(overlapping.ok());
  EXPECT_NE(overlapping.error().message.find("overlaps"), std::string::npos);
  std::ofstream(path_, std::ios::trunc) << "{\"active\": [\"1\"]}";
  EXPECT_FALSE(OpenFileFabricManager(Table(), path_).ok());
}

TEST_F(FileFabricManagerTest, ReportedPartitionsRebuildTheTable) {
  auto manager = Open();
  auto listed = manager->ListPartitions();
  ASSERT_TRUE(listed.ok());
  auto table = TableFromPartitions(*listed, "hgx-h100-8gpu");
  ASSERT_TRUE(table.ok()) << table.error().message;
  EXPECT_EQ(*table, Table());
}

TEST(TableFromPartitions, ConflictingAddressesAreRefused) {
  std::vector<SupportedPartition> partitions = {
      {0, false, {{1, "0000:10:00.0", "", 0, 0}}},
      {1, false, {{1, "0000:20:00.0", "", 0, 0}, {2, "", "", 0, 0}}},
  };
  auto table = TableFromPartitions(partitions, "x");
  ASSERT_FALSE(table.ok());
  EXPECT_NE(table.error().message.find("module 1 at both"), std::string::npos);
}

}  // namespace
}  // namespace tessera::fabricmanager

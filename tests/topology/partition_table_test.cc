#include <gtest/gtest.h>

#include "topology/topology.h"

namespace tessera::topology {
namespace {

constexpr const char* kYamlTable = R"(
board: test-4gpu
modules: 4
partitions:
  - id: 0
    gpus: [1, 2, 3, 4]
  - id: 1
    gpus: [3, 1]
  - id: 2
    gpus: [2, 4]
pci_addresses:
  1: "0000:1b:00.0"
  2: "0000:18:00.0"
)";

std::string ErrorOf(std::string_view text, TableFormat format = TableFormat::kYaml) {
  auto table = ParsePartitionTable(text, format);
  EXPECT_FALSE(table.ok()) << "parsed: " << text;
  return table.ok() ? "" : table.error().message;
}

TEST(PartitionTable, HgxPresetMatchesTheShippedFabric) {
  PartitionTable table = HgxH100Table();
  EXPECT_EQ(table.module_count, 8);
  ASSERT_EQ(table.partitions.size(), 15u);
  EXPECT_EQ(table.partitions[0], (FabricPartition{0, {1, 2, 3, 4, 5, 6, 7, 8}}));
  EXPECT_EQ(table.partitions[1], (FabricPartition{1, {1, 2, 3, 4}}));
  EXPECT_EQ(table.partitions[2], (FabricPartition{2, {5, 6, 7, 8}}));
  EXPECT_EQ(table.partitions[3], (FabricPartition{3, {1, 3}}));
  EXPECT_EQ(table.partitions[4], (FabricPartition{4, {2, 4}}));
  EXPECT_EQ(table.partitions[5], (FabricPartition{5, {5, 7}}));
  EXPECT_EQ(table.partitions[6], (FabricPartition{6, {6, 8}}));
  for (int module = 1; module <= 8; ++module) {
    EXPECT_EQ(table.partitions[6 + module], (FabricPartition{uint32_t(6 + module), {module}}));
  }
  EXPECT_TRUE(ValidatePartitionTable(table).ok());
}

TEST(PartitionTable, PresetsByNameAndUnknownPresetIsNotFound) {
  auto h200 = PresetTable("hgx-h200-8gpu");
  ASSERT_TRUE(h200.ok());
  EXPECT_EQ(h200->board, "hgx-h200-8gpu");
  EXPECT_EQ(h200->partitions, HgxH100Table().partitions);
  auto unknown = PresetTable("dgx-2");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().category, ErrorCategory::kNotFound);
  EXPECT_NE(unknown.error().message.find("hgx-h100-8gpu"), std::string::npos);
}

TEST(PartitionTable, ParsesYamlAndSortsModules) {
  auto table = ParsePartitionTable(kYamlTable, TableFormat::kYaml);
  ASSERT_TRUE(table.ok()) << table.error().message;
  EXPECT_EQ(table->board, "test-4gpu");
  EXPECT_EQ(table->module_count, 4);
  ASSERT_EQ(table->partitions.size(), 3u);
  EXPECT_EQ(table->partitions[1].modules, (std::vector<int>{1, 3}));
  EXPECT_EQ(table->pci_addresses.at(1), "0000:1b:00.0");
  EXPECT_EQ(table->pci_addresses.at(2), "0000:18:00.0");
}

TEST(PartitionTable, JsonRoundTripsThroughTheSameFormat) {
  PartitionTable table = HgxH100Table();
  table.pci_addresses = {{1, "0000:18:00.0"}, {2, "0000:2a:00.0"}};
  auto parsed = ParsePartitionTable(PartitionTableToJson(table), TableFormat::kJson);
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  EXPECT_EQ(*parsed, table);
}

TEST(PartitionTable, FileNamePicksTheFormat) {
  EXPECT_TRUE(ParsePartitionTableFile("board.yaml", kYamlTable).ok());
  EXPECT_TRUE(ParsePartitionTableFile("board.yml", kYamlTable).ok());
  EXPECT_TRUE(ParsePartitionTableFile("b.json", PartitionTableToJson(HgxH100Table())).ok());
  auto unknown = ParsePartitionTableFile("board.txt", kYamlTable);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message.find("board.txt"), std::string::npos);
  auto bad = ParsePartitionTableFile("bad.json", "{");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message.rfind("bad.json: JSON", 0), 0u) << bad.error().message;
}

struct BadTable {
  const char* name;
  const char* text;
  const char* message;  // expected substring
};

class BadTables : public ::testing::TestWithParam<BadTable> {};

TEST_P(BadTables, AreRefusedWithAClearError) {
  const BadTable& bad = GetParam();
  std::string message = ErrorOf(bad.text);
  EXPECT_NE(message.find(bad.message), std::string::npos) << message;
}

INSTANTIATE_TEST_SUITE_P(
    PartitionTable, BadTables,
    ::testing::Values(
        BadTable{"UnknownModuleId", "modules: 8\npartitions: [{id: 0, gpus: [1, 9]}]",
                 "partitions[0] (id 0): gpus[1]: unknown module ID 9 (modules 1..8)"},
        BadTable{"ModuleZero", "modules: 8\npartitions: [{id: 0, gpus: [0]}]",
                 "unknown module ID 0"},
        BadTable{"LargerThanTheBoard", "modules: 2\npartitions: [{id: 0, gpus: [1, 2, 1]}]",
                 "3 GPUs, larger than the board (modules 1..2)"},
        BadTable{"DuplicatePartitionId",
                 "modules: 4\npartitions: [{id: 1, gpus: [1]}, {id: 1, gpus: [2]}]",
                 "partitions[1] (id 1): duplicate partition id 1 (also partitions[0])"},
        BadTable{"ModuleListedTwice", "modules: 4\npartitions: [{id: 0, gpus: [2, 2]}]",
                 "module 2 is listed twice"},
        BadTable{"SameGpusTwice",
                 "modules: 4\npartitions: [{id: 0, gpus: [1, 2]}, {id: 5, gpus: [2, 1]}]",
                 "same GPUs {1,2} as partition id 0"},
        BadTable{"EmptyPartition", "modules: 4\npartitions: [{id: 0, gpus: []}]", "gpus is empty"},
        BadTable{"NoPartitions", "modules: 4\npartitions: []", "no partitions"},
        BadTable{"MissingModules", "partitions: [{id: 0, gpus: [1]}]", "modules: missing"},
        BadTable{"TooManyModules", "modules: 17\npartitions: [{id: 0, gpus: [1]}]",
                 "modules: 17 is out of range (1..16)"},
        BadTable{"UnknownTopLevelField",
                 "modules: 4\nboard: x\nnvswitches: 4\npartitions: [{id: 0, gpus: [1]}]",
                 "nvswitches: unknown field"},
        BadTable{"UnknownPartitionField", "modules: 4\npartitions: [{id: 0, gpus: [1], name: a}]",
                 "partitions[0].name: unknown field"},
        BadTable{"QuotedNumberIsNotAnInteger", "modules: \"4\"\npartitions: [{id: 0, gpus: [1]}]",
                 "modules: expected an integer"},
        BadTable{"NegativeId", "modules: 4\npartitions: [{id: -1, gpus: [1]}]",
                 "partitions[0].id: -1 is out of range"},
        BadTable{"GpusNotAList", "modules: 4\npartitions: [{id: 0, gpus: 1}]",
                 "partitions[0].gpus: expected a list"},
        BadTable{"PciAddressForUnknownModule",
                 "modules: 2\npartitions: [{id: 0, gpus: [1]}]\npci_addresses: {3: "
                 "\"0000:18:00.0\"}",
                 "pci_addresses[3]: unknown module ID 3"},
        BadTable{"MalformedPciAddress",
                 "modules: 2\npartitions: [{id: 0, gpus: [1]}]\npci_addresses: {1: \"18:00.0\"}",
                 "is not a PCI address"},
        BadTable{"UppercasePciAddress",
                 "modules: 2\npartitions: [{id: 0, gpus: [1]}]\npci_addresses: {1: "
                 "\"0000:1B:00.0\"}",
                 "is not a PCI address"},
        BadTable{"SharedPciAddress",
                 "modules: 2\npartitions: [{id: 0, gpus: [1]}]\npci_addresses: {1: "
                 "\"0000:18:00.0\", 2: \"0000:18:00.0\"}",
                 "PCI address 0000:18:00.0 is also module 1"},
        BadTable{"BoardNameWithSpaces",
                 "board: my board\nmodules: 4\npartitions: [{id: 0, gpus: [1]}]",
                 "board: \"my board\" must be"},
        BadTable{"NotAMapping", "- 1\n- 2\n", "expected an object at the top level"},
        BadTable{"BrokenYaml", "modules: [1,\n", "YAML:"}),
    [](const ::testing::TestParamInfo<BadTable>& info) { return std::string(info.param.name); });

TEST(PartitionTable, MoreThanSixtyFourPartitionsIsRefused) {
  PartitionTable table;
  table.module_count = 16;
  for (uint32_t i = 0; i < 65; ++i) {
    // 65 distinct non-empty subsets of 16 modules.
    FabricPartition p{i, {}};
    for (int bit = 0; bit < 16; ++bit) {
      if ((i + 1) & (1 << bit)) p.modules.push_back(bit + 1);
    }
    table.partitions.push_back(p);
  }
  auto status = ValidatePartitionTable(table);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.error().message.find("limit of 64"), std::string::npos);
}

TEST(PartitionTable, BadJsonNamesTheProblem) {
  EXPECT_NE(ErrorOf("{\"modules\": 4, \"partitions\": [{\"id\": 0, \"gpus\": [1.5]}]}",
                    TableFormat::kJson)
                .find("partitions[0].gpus[0]: expected an integer"),
            std::string::npos);
  EXPECT_NE(ErrorOf("[1,", TableFormat::kJson).find("JSON:"), std::string::npos);
}

}  // namespace
}  // namespace tessera::topology

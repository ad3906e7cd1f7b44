// Profile tables and layout files: the shipped data parses, hostile or wrong files are refused
// with the field named.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "mig/mig.h"

namespace tessera::mig {
namespace {

std::string Data(const std::string& name) {
  std::ifstream in(std::string(TESSERA_SOURCE_DIR) + "/data/mig-profiles/" + name);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(MigProfileTable, TheBuiltInH100TableHasEveryProfileWithItsPlacements) {
  const ProfileTable& table = BuiltinH100Table();
  EXPECT_EQ(table.board, "H100 80GB");
  EXPECT_EQ(table.memory_slices, 8u);
  std::vector<std::pair<std::string, uint32_t>> ids;
  for (const auto& p : table.profiles)
    ids.push_back({p.name, p.id});
  EXPECT_EQ(ids, (std::vector<std::pair<std::string, uint32_t>>{{"1g.10gb", 19},
                                                                {"1g.10gb+me", 20},
                                                                {"1g.20gb", 15},
                                                                {"2g.20gb", 14},
                                                                {"3g.40gb", 9},
                                                                {"4g.40gb", 5},
                                                                {"7g.80gb", 0}}));
  EXPECT_EQ(table.FindByName("1g.20gb")->starts, (std::vector<uint32_t>{0, 2, 4, 6}));
  EXPECT_EQ(table.FindByName("3g.40gb")->starts, (std::vector<uint32_t>{0, 4}));
  EXPECT_EQ(table.FindByName("7g.80gb")->size, 8u);
  std::vector<ProfileTable> tables = {table};
  EXPECT_EQ(TableForDevice(tables, "10de:2330"), &tables[0]);
  EXPECT_EQ(TableForDevice(tables, "10de:20b0"), nullptr);
}

TEST(MigProfileTable, TheA100FileParses) {
  auto table = ParseProfileTable(Data("a100-40gb.yaml"));
  ASSERT_TRUE(table.ok()) << table.error().message;
  EXPECT_EQ(table->FindByName("3g.20gb")->id, 9u);
  EXPECT_EQ(table->pci_device_ids.front(), "10de:20b0");
}

TEST(MigProfileTable, RefusesPlacementsPastTheLastSliceAndUnknownFields) {
  std::string base =
      "board: X\npci_device_ids: [\"10de:0001\"]\nmemory_slices: 8\ncompute_slices: 7\n";
  auto past =
      ParseProfileTable(base +
                        "profiles:\n  - {name: a, id: 1, compute_slices: 1, size: 2, starts: [7], "
                        "max_instances: 1}\n");
  ASSERT_FALSE(past.ok());
  EXPECT_NE(past.error().message.find("profiles[0].starts[0]"), std::string::npos)
      << past.error().message;
  auto unknown = ParseProfileTable(base + "profiles: []\nextra: 1\n");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message.find("extra"), std::string::npos);
  EXPECT_FALSE(ParseProfileTable("[unclosed").ok());
}

TEST(MigLayout, ReadsAMigPartedStyleConfig) {
  auto config = ParseLayoutConfig(R"(version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  mixed:
    - devices: [0, "0000:2a:00.0"]
      mig-enabled: true
      mig-devices: {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1}
    - devices: all
      mig-enabled: false
)",
                                  "mixed");
  ASSERT_TRUE(config.ok()) << config.error().message;
  ASSERT_EQ(config->entries.size(), 2u);
  EXPECT_TRUE(config->entries[0].devices.Matches(0, "0000:18:00.0"));
  EXPECT_TRUE(config->entries[0].devices.Matches(1, "0000:2a:00.0"));
  EXPECT_FALSE(config->entries[0].devices.Matches(2, "0000:3a:00.0"));
  EXPECT_EQ(config->entries[0].mig_devices.size(), 3u);
  EXPECT_FALSE(config->entries[1].mig_enabled);
}

TEST(MigLayout, RefusesAmbiguousOrMalformedFiles) {
  std::string two =
      "version: v1\nmig-configs:\n  a: [{devices: all, mig-enabled: false}]\n"
      "  b: [{devices: all, mig-enabled: false}]\n";
  auto ambiguous = ParseLayoutConfig(two, "");
  ASSERT_FALSE(ambiguous.ok());
  EXPECT_NE(ambiguous.error().message.find("--select"), std::string::npos);
  EXPECT_EQ(ParseLayoutConfig(two, "c").error().category, ErrorCategory::kNotFound);
  auto bad_device = ParseLayoutConfig(
      "version: v1\nmig-configs:\n  a: [{devices: [\"/etc/passwd\"], mig-enabled: false}]\n", "");
  ASSERT_FALSE(bad_device.ok());
  EXPECT_NE(bad_device.error().message.find("neither a GPU index nor a PCI address"),
            std::string::npos);
  EXPECT_FALSE(ParseLayoutConfig("version: v2\nmig-configs: {}\n", "").ok());
  EXPECT_FALSE(
      ParseLayoutConfig("version: v1\nmig-configs:\n  a: [{devices: all, mig-enabled: true, "
                        "mig-devices: {\"1g.10gb\": -1}}]\n",
                        "")
          .ok());
}

}  // namespace
}  // namespace tessera::mig

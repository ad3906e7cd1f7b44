// The one YAML reader: a document's nodes and depth are measured as a walk would see them,
// aliases expanded, before anything is converted or walked.
#include "common/bounded_yaml.h"

#include <gtest/gtest.h>

#include <string>

#include "support/hostile_files.h"

namespace tessera {
namespace {

size_t WalkedNodes(const YAML::Node& node) {
  size_t n = 1;
  if (node.IsMap()) {
    for (const auto& item : node)
      n += WalkedNodes(item.first) + WalkedNodes(item.second);
  } else if (node.IsSequence()) {
    for (const auto& item : node)
      n += WalkedNodes(item);
  }
  return n;
}

TEST(BoundedYaml, LoadsAnOrdinaryDocument) {
  auto node = LoadBoundedYaml("version: v1\nresources:\n  - name: a\n    count: 2\n");
  ASSERT_TRUE(node.ok()) << node.error().message;
  EXPECT_EQ((*node)["version"].as<std::string>(), "v1");
  EXPECT_EQ((*node)["resources"][0]["count"].as<int>(), 2);
  EXPECT_TRUE(LoadBoundedYaml("").ok());  // an empty document is a null node
}

TEST(BoundedYaml, BillionLaughsIsRefusedBeforeAnythingExpands) {
  auto node = LoadBoundedYaml(testing::AliasBomb("board: x\n", "laughs"));
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(node.error().category, ErrorCategory::kInvalidArgument);
  EXPECT_EQ(node.error().message, "YAML: more than 100000 nodes with its aliases expanded");
}

TEST(BoundedYaml, AnAliasCountsItsWholeSubtreeEachTimeItIsUsed) {
  // 1 map + key "a" + seq + 3 items = 6; "b" + seq + 4 aliases of the 4-node subtree = 18.
  const std::string text = "a: &x [1, 2, 3]\nb: [*x, *x, *x, *x]\n";
  auto loaded = LoadBoundedYaml(text);
  ASSERT_TRUE(loaded.ok());
  const size_t walked = WalkedNodes(*loaded);
  EXPECT_EQ(walked, 24u);
  EXPECT_TRUE(LoadBoundedYaml(text, YamlBounds{walked, 64}).ok());
  EXPECT_FALSE(LoadBoundedYaml(text, YamlBounds{walked - 1, 64}).ok());
}

TEST(BoundedYaml, NestingIsBoundedWithAliasesExpanded) {
  auto nested = [](int levels) {
    return std::string(static_cast<size_t>(levels), '[') + "x" +
           std::string(static_cast<size_t>(levels), ']');
  };
  EXPECT_TRUE(LoadBoundedYaml(nested(64)).ok());
  auto deep = LoadBoundedYaml(nested(65));
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(deep.error().message, "YAML: nested deeper than 64 levels with its aliases expanded");
  // Forty levels under an anchor, used thirty levels down: seventy once expanded.
  auto through_alias = LoadBoundedYaml("a: &a " + nested(40) + "\nb: " + std::string(30, '[') +
                                       "*a" + std::string(30, ']') + "\n");
  ASSERT_FALSE(through_alias.ok());
  EXPECT_NE(through_alias.error().message.find("nested deeper than 64"), std::string::npos);
  // 100,000 levels: refused, and the parser's own recursion never gets there.
  EXPECT_FALSE(LoadBoundedYaml(nested(100000)).ok());
}

TEST(BoundedYaml, AnAliasInsideTheNodeItNamesIsACycleAndRefused) {
  auto cycle = LoadBoundedYaml("a: &a [x, *a]\n");
  ASSERT_FALSE(cycle.ok());
  EXPECT_EQ(cycle.error().message, "YAML: an alias refers to a node that contains it");
}

TEST(BoundedYaml, SyntaxErrorsSayWhere) {
  auto broken = LoadBoundedYaml("modules: [1,\n");
  ASSERT_FALSE(broken.ok());
  EXPECT_EQ(broken.error().message.rfind("YAML: ", 0), 0u);
  EXPECT_NE(broken.error().message.find("line"), std::string::npos) << broken.error().message;
  auto unknown = LoadBoundedYaml("a: *nowhere\n");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message.find("anchor"), std::string::npos) << unknown.error().message;
}

}  // namespace
}  // namespace tessera

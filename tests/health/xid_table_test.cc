#include <gtest/gtest.h>

#include <fstream>

#include "health/health.h"

namespace tessera::health {
namespace {

TEST(XidTable, TheBuiltInTableClassifiesNvidiasCatalogue) {
  const XidTable& table = XidTable::Default();
  EXPECT_EQ(table.Find(13).fault_class, FaultClass::kApplication);
  EXPECT_EQ(table.Find(31).fault_class, FaultClass::kApplication);
  EXPECT_EQ(table.Find(43).fault_class, FaultClass::kApplication);
  EXPECT_EQ(table.Find(45).fault_class, FaultClass::kApplication);
  EXPECT_EQ(table.Find(94).fault_class, FaultClass::kContained);
  for (uint64_t xid : {48, 62, 63, 79, 95, 119, 120, 140}) {
    EXPECT_EQ(table.Find(xid).fault_class, FaultClass::kGpu) << xid;
  }
  EXPECT_EQ(table.Find(74).fault_class, FaultClass::kNvlink);
  EXPECT_EQ(table.Find(92).fault_class, FaultClass::kTrend);
  EXPECT_FALSE(table.Find(64).reset);
  EXPECT_TRUE(table.Find(79).reset);
  EXPECT_EQ(table.Find(79).name, "GPU has fallen off the bus");
}

TEST(XidTable, TheBuiltInTableIsTheDataFile) {
  std::ifstream in(std::string(TESSERA_SOURCE_DIR) + "/data/xid-table.yaml");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  auto parsed = XidTable::Parse(text);
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  EXPECT_EQ(parsed->rules().size(), XidTable::Default().rules().size());
}

TEST(XidTable, UnknownXidsGetTheDefaultClass) {
  EXPECT_EQ(XidTable::Default().Find(999).fault_class, FaultClass::kTrend);
  EXPECT_EQ(XidTable::Default().Find(999).name, "unknown Xid");
  auto table = XidTable::Parse("default: {class: gpu}\n");
  ASSERT_TRUE(table.ok());
  EXPECT_EQ(table->Find(999).fault_class, FaultClass::kGpu);
}

TEST(XidTable, AnOverrideReplacesEntriesByXidAndKeepsTheRest) {
  auto table = XidTable::Parse(
      "xids:\n  - {xid: 13, name: \"engine fault, our boards\", class: gpu, reset: false}\n"
      "  - {xid: 4242, name: \"vendor specific\", class: contained}\n",
      &XidTable::Default());
  ASSERT_TRUE(table.ok()) << table.error().message;
  EXPECT_EQ(table->Find(13).fault_class, FaultClass::kGpu);
  EXPECT_FALSE(table->Find(13).reset);
  EXPECT_EQ(table->Find(4242).fault_class, FaultClass::kContained);
  EXPECT_EQ(table->Find(79).fault_class, FaultClass::kGpu);  // kept from the base
  EXPECT_EQ(table->rules().size(), XidTable::Default().rules().size() + 1);
}

TEST(XidTable, MalformedTablesAreRefusedNamingTheField) {
  struct Case {
    const char* yaml;
    const char* names;
  };
  for (const Case& c : {
           Case{"xids: [{xid: 13, name: x, class: fatal}]", "xids[0].class"},
           Case{"xids: [{xid: -1, name: x, class: gpu}]", "xids[0].xid"},
           Case{"xids: [{xid: 99999999, name: x, class: gpu}]", "xids[0].xid"},
           Case{"xids: [{xid: 13, class: gpu}]", "xids[0].name"},
           Case{"xids: [{xid: 13, name: x, class: gpu, colour: red}]", "xids[0].colour"},
           Case{"xids: [{xid: 13, name: x, class: gpu, reset: maybe}]", "xids[0].reset"},
           Case{"xids: {xid: 13}", "xids"},
           Case{"rules: []", "rules"},
           Case{"- 1\n- 2\n", "mapping"},
           Case{"default: {class: [gpu]}", "default.class"},
       }) {
    auto table = XidTable::Parse(c.yaml);
    ASSERT_FALSE(table.ok()) << c.yaml;
    EXPECT_EQ(table.error().category, ErrorCategory::kInvalidArgument) << c.yaml;
    EXPECT_NE(table.error().message.find(c.names), std::string::npos)
        << c.yaml << ": " << table.error().message;
  }
}

TEST(XidTable, NamesAreBoundedAndPrintable) {
  std::string long_name(200, 'a');
  EXPECT_FALSE(XidTable::Parse("xids: [{xid: 1, name: " + long_name + ", class: gpu}]").ok());
  EXPECT_FALSE(XidTable::Parse("xids: [{xid: 1, name: \"bell\\a\", class: gpu}]").ok());
}

TEST(XidTable, AnOperatorFileThatIsNoRegularFileIsRefused) {
  auto table = XidTable::Load("/dev/zero");
  ASSERT_FALSE(table.ok());
  auto missing = XidTable::Load("/nonexistent/xids.yaml");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().category, ErrorCategory::kNotFound);
}

}  // namespace
}  // namespace tessera::health

// The byte-level helpers of the native Windows backend, which also compile here.
#include "inventory/windows/native_strings.h"

#include <gtest/gtest.h>

namespace tessera::windows::native {
namespace {

std::u16string_view View(const std::u16string& s) {
  return {s.data(), s.size()};
}

TEST(NativeStrings, RegistryStringStopsAtTheFirstNul) {
  std::u16string data = u"nvapi64.dll";
  data.push_back(u'\0');
  data += u"junk";
  EXPECT_EQ(RegistryString(View(data)), "nvapi64.dll");
  EXPECT_EQ(RegistryString(u"no terminator"), "no terminator");
}

TEST(NativeStrings, MultiStringSplitsAndToleratesMissingTerminators) {
  std::u16string data = u"nvcuda64.dll";
  data.push_back(u'\0');
  data += u"nvcuda.dll";
  data.push_back(u'\0');
  data.push_back(u'\0');
  EXPECT_EQ(MultiString(View(data)), (std::vector<std::string>{"nvcuda64.dll", "nvcuda.dll"}));
  data.resize(data.size() - 2);  // a driver INF that forgot both terminators
  EXPECT_EQ(MultiString(View(data)), (std::vector<std::string>{"nvcuda64.dll", "nvcuda.dll"}));
  EXPECT_TRUE(MultiString(u"").empty());
}

TEST(NativeStrings, Utf16BecomesUtf8) {
  EXPECT_EQ(Utf16ToUtf8(u"Intel(R) Iris(R) Xe"), "Intel(R) Iris(R) Xe");
  EXPECT_EQ(Utf16ToUtf8(u"Gr\u00e4fik \u20ac"),
            "Gr\xc3\xa4"
            "fik \xe2\x82\xac");
  EXPECT_EQ(Utf16ToUtf8(u"\U0001F600"), "\xf0\x9f\x98\x80");
  std::u16string lone(1, static_cast<char16_t>(0xd800));
  EXPECT_EQ(Utf16ToUtf8(View(lone)), "\xef\xbf\xbd");
}

TEST(NativeStrings, ClassCodeComesFromCompatibleIds) {
  EXPECT_EQ(ClassCodeFromCompatibleIds(
                {"PCI\\VEN_10DE&DEV_1EB8&REV_A1", "PCI\\VEN_10DE&CC_030200", "PCI\\CC_0302"}),
            0x030200u);
  EXPECT_EQ(ClassCodeFromCompatibleIds({"PCI\\CC_1200"}), 0x120000u);
  EXPECT_FALSE(ClassCodeFromCompatibleIds({"SWD\\REMOTEDISPLAYENUM"}));
}

TEST(NativeStrings, DriverVersionHasFourParts) {
  EXPECT_EQ(FormatDriverVersion(0x001f00000000'0eb2ull), "31.0.0.3762");
  EXPECT_EQ(FormatDriverVersion((31ull << 48) | (15ull << 16) | 3770), "31.0.15.3770");
}

TEST(NativeStrings, SchemaVersionsAreFoundInServiceProperties) {
  std::string json =
      R"({"Properties":[{"SupportedSchemaVersions":[{"Major":2,"Minor":5},{"Major":2,"Minor":1},)"
      R"({"Major":2,"Minor":1}]}]})";
  std::vector<SchemaVersion> v = SchemaVersionsFromServiceProperties(json);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(FormatSchemaVersion(v[0]), "2.1");
  EXPECT_EQ(FormatSchemaVersion(v[1]), "2.5");
  EXPECT_TRUE(SchemaVersionsFromServiceProperties("not json").empty());
  EXPECT_TRUE(SchemaVersionsFromServiceProperties(R"({"Properties":[]})").empty());
}

}  // namespace
}  // namespace tessera::windows::native

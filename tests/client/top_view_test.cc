// `tessera top`'s frame: the figures of a /v1/telemetry document are shown within their ranges
// whatever the server sent (a percentage never below 0 or above 100, never a wrapped integer),
// missing or mistyped fields as blanks, and text without terminal escapes.
#include "client/top_view.h"

#include <gtest/gtest.h>

#include <regex>

namespace tessera::client {
namespace {

using nlohmann::json;

TEST(TopView, AnOrdinaryFrame) {
  json doc = {{"gpus",
               {{{"index", 0},
                 {"pci_address", "0000:18:00.0"},
                 {"model", "NVIDIA H100 80GB HBM3"},
                 {"gpu_percent", 87},
                 {"memory_used", 34359738368.0},
                 {"memory_total", 85899345920.0},
                 {"power_watts", 412.3},
                 {"temperature_c", 61},
                 {"unattributed", {{"processes", 1}, {"memory_bytes", 0}, {"sm_percent", 5}}},
                 {"holders",
                  {{{"tenancy", "team-a"},
                    {"container", "c-1"},
                    {"processes", 2},
                    {"memory_bytes", 1073741824.0},
                    {"sm_percent", 80}}}}}}}};
  const std::string frame = RenderTop(doc, "http://x", 0);
  EXPECT_NE(frame.find("   87%"), std::string::npos) << frame;
  EXPECT_NE(frame.find("32.0/80.0"), std::string::npos) << frame;
  EXPECT_NE(frame.find("team-a/c-1"), std::string::npos) << frame;
  EXPECT_NE(frame.find("team-a                       1       0.80"), std::string::npos) << frame;
}

TEST(TopView, HugeNegativeAndNonNumericFiguresStayInTheirRanges) {
  json gpu = {
      {"index", 1e300},
      {"pci_address", "0000:18:00.0\x1b[2J"},
      {"gpu_percent", 1e30},
      {"memory_used", -5},
      {"memory_total", 1e300},
      {"power_watts", -1e300},
      {"temperature_c", "hot"},
      {"lost", "yes"},
      {"mig_instances", {{{"gpu_instance_id", -3}, {"sm_percent", -1e12}}}},
      {"unattributed", {{"processes", 1e300}, {"sm_percent", 1e300}}},
      {"holders", {{{"tenancy", "t"}, {"sm_percent", 2147483648.0 * 4}, {"processes", -1}}}}};
  json doc = {{"gpus", {gpu}}};
  const std::string frame = RenderTop(doc, "http://x", 0);
  EXPECT_EQ(frame.find("-2147483648"), std::string::npos) << frame;
  EXPECT_EQ(frame.find('\x1b'), std::string::npos) << frame;
  EXPECT_NE(frame.find(" 100%"), std::string::npos) << frame;     // the GPU at most 100 %
  EXPECT_NE(frame.find("SM    0%"), std::string::npos) << frame;  // the MIG instance at least 0
  EXPECT_EQ(frame.find("inf"), std::string::npos) << frame;
  EXPECT_EQ(frame.find("nan"), std::string::npos) << frame;
  EXPECT_FALSE(std::regex_search(frame, std::regex(" -[0-9]"))) << frame;  // nothing negative
  // The tenancy's SM use is its one GPU's at most.
  EXPECT_NE(frame.find("t                            1       1.00"), std::string::npos) << frame;
}

TEST(TopView, NotADocumentIsAnEmptyFrame) {
  for (const json& doc : {json(), json::array(), json{{"gpus", 5}}, json{{"gpus", {1, "x"}}}}) {
    const std::string frame = RenderTop(doc, "http://x", 0);
    EXPECT_NE(frame.find("(unattributed)"), std::string::npos) << frame;
  }
}

}  // namespace
}  // namespace tessera::client

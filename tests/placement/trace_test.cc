#include <gtest/gtest.h>

#include "placement/placement.h"

namespace tessera::placement {
namespace {

TEST(TraceCsv, ParsesHeaderCommentsBlankLinesAndCrlf) {
  auto trace = ParseTraceCsv(
      "# a test trace\r\narrival_s,duration_s,gpus\r\n\r\n0,3600,8\r\n 1.5 , 60 , 1 \n2e1,0.5,2");
  ASSERT_TRUE(trace.ok()) << trace.error().message;
  ASSERT_EQ(trace->size(), 3u);
  EXPECT_EQ((*trace)[0].gpus, 8);
  EXPECT_DOUBLE_EQ((*trace)[1].arrival_s, 1.5);
  EXPECT_DOUBLE_EQ((*trace)[1].duration_s, 60);
  EXPECT_DOUBLE_EQ((*trace)[2].arrival_s, 20);
  EXPECT_EQ((*trace)[2].gpus, 2);
}

TEST(TraceCsv, HeaderIsOptionalAndEmptyIsEmpty) {
  auto trace = ParseTraceCsv("0,1,1\n");
  ASSERT_TRUE(trace.ok());
  EXPECT_EQ(trace->size(), 1u);
  auto empty = ParseTraceCsv("");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

struct BadLine {
  const char* text;
  const char* message;
};

class BadTraces : public ::testing::TestWithParam<BadLine> {};

TEST_P(BadTraces, NameTheLineAndField) {
  auto trace = ParseTraceCsv(GetParam().text);
  ASSERT_FALSE(trace.ok()) << GetParam().text;
  EXPECT_EQ(trace.error().category, ErrorCategory::kInvalidArgument);
  EXPECT_NE(trace.error().message.find(GetParam().message), std::string::npos)
      << trace.error().message;
}

INSTANTIATE_TEST_SUITE_P(
    TraceCsv, BadTraces,
    ::testing::Values(
        BadLine{"0,1\n", "line 1: 2 fields, expected 3 or 4"},
        BadLine{"0,1,1,a,b\n", "line 1: more than 4 fields"},
        BadLine{"0,1,1,\n", "line 1: tenancy is not 1..63 characters"},
        BadLine{"0,1,1,Flood\n", "line 1: tenancy"}, BadLine{"0,1,1,a/b\n", "line 1: tenancy"},
        BadLine{"0,1,1,aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
                "line 1: tenancy"},
        BadLine{"0,1,1\nx,1,1\n", "line 2: arrival_s \"x\" is not a number >= 0"},
        BadLine{"-1,1,1", "arrival_s \"-1\""},
        BadLine{"0,0,1", "duration_s \"0\" is not a number > 0"},
        BadLine{"0,nan,1", "duration_s \"nan\""}, BadLine{"0,inf,1", "duration_s \"inf\""},
        BadLine{"0,1e999,1", "duration_s \"1e999\""},
        BadLine{"0,1,1.5", "gpus \"1.5\" is not a whole number 1..64"},
        BadLine{"0,1,0", "gpus \"0\""}, BadLine{"0,1,65", "gpus \"65\""},
        BadLine{"0,1,", "gpus \"\""}, BadLine{"0x10,1,1", "arrival_s \"0x10\""}));

TEST(TraceCsv, TheFourthColumnNamesTheTenancy) {
  auto trace =
      ParseTraceCsv("arrival_s,duration_s,gpus,tenancy\n0,1,1,flood\n1,1,2, team-7 \n2,1,1\n");
  ASSERT_TRUE(trace.ok()) << trace.error().message;
  ASSERT_EQ(trace->size(), 3u);
  EXPECT_EQ((*trace)[0].tenancy, "flood");
  EXPECT_EQ((*trace)[1].tenancy, "team-7");
  EXPECT_EQ((*trace)[2].tenancy, kDefaultTenancy);
  auto again = ParseTraceCsv(TraceToCsv(*trace));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)[1].tenancy, "team-7");
  EXPECT_EQ(TraceToCsv({{0, 1, 1}}).find("tenancy"), std::string::npos);
}

TEST(TraceCsv, RoundTripsThroughTraceToCsv) {
  std::vector<Request> requests = {{0, 10, 1}, {1.25, 3600, 8}};
  auto parsed = ParseTraceCsv(TraceToCsv(requests));
  ASSERT_TRUE(parsed.ok());
  ASSERT_EQ(parsed->size(), 2u);
  EXPECT_DOUBLE_EQ((*parsed)[1].arrival_s, 1.25);
  EXPECT_EQ((*parsed)[1].gpus, 8);
}

TEST(SyntheticTrace, SameSeedSameTraceOtherSeedOtherTrace) {
  SyntheticOptions options;
  options.requests = 2000;
  auto a = SyntheticTrace(options);
  auto b = SyntheticTrace(options);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(TraceToCsv(*a), TraceToCsv(*b));
  options.seed = 2;
  auto c = SyntheticTrace(options);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(TraceToCsv(*a), TraceToCsv(*c));
}

TEST(SyntheticTrace, MixAndLoadAreWhatWasAskedFor) {
  SyntheticOptions options;
  options.requests = 40000;
  auto trace = SyntheticTrace(options);
  ASSERT_TRUE(trace.ok());
  std::map<int, int> sizes;
  double gpu_seconds = 0;
  for (const Request& r : *trace) {
    ++sizes[r.gpus];
    gpu_seconds += r.gpus * r.duration_s;
  }
  EXPECT_EQ(sizes.size(), 4u);
  EXPECT_NEAR(sizes[1] / 40000.0, 0.45, 0.01);
  EXPECT_NEAR(sizes[2] / 40000.0, 0.25, 0.01);
  EXPECT_NEAR(sizes[4] / 40000.0, 0.15, 0.01);
  EXPECT_NEAR(sizes[8] / 40000.0, 0.15, 0.01);
  double span = trace->back().arrival_s - trace->front().arrival_s;
  EXPECT_NEAR(gpu_seconds / (options.total_gpus * span), options.load, 0.05);
}

TEST(SyntheticTrace, BadOptionsAreRefused) {
  SyntheticOptions options;
  options.load = 0;
  EXPECT_FALSE(SyntheticTrace(options).ok());
  options = {};
  options.size_weights = {{1, 0}};
  EXPECT_FALSE(SyntheticTrace(options).ok());
  options = {};
  options.duration_median_s = -1;
  EXPECT_FALSE(SyntheticTrace(options).ok());
}

}  // namespace
}  // namespace tessera::placement

#include <gtest/gtest.h>

#include <set>

#include "placement/mig_fleet.h"

namespace tessera::placement {
namespace {

TEST(MigTrace, ParsesEveryKindWithHeaderCommentsAndCrlf) {
  auto trace = ParseMigTrace(
      "# a test trace\r\narrival_s,tenancy,kind,size,duration_s\r\n\r\n"
      "0,team-a,whole,8,3600\r\n 1.5 , t1 , mig , 1g.10gb , 60 \n2e1,t2,share,24:0.25,0.5");
  ASSERT_TRUE(trace.ok()) << trace.error().message;
  ASSERT_EQ(trace->size(), 3u);
  EXPECT_EQ((*trace)[0].kind, MigRequestKind::kWhole);
  EXPECT_EQ((*trace)[0].gpus, 8);
  EXPECT_EQ((*trace)[0].tenancy, "team-a");
  EXPECT_EQ((*trace)[1].kind, MigRequestKind::kMig);
  EXPECT_EQ((*trace)[1].profile, "1g.10gb");
  EXPECT_DOUBLE_EQ((*trace)[1].arrival_s, 1.5);
  EXPECT_EQ((*trace)[2].kind, MigRequestKind::kShare);
  EXPECT_DOUBLE_EQ((*trace)[2].share_memory_gib, 24);
  EXPECT_DOUBLE_EQ((*trace)[2].share_compute, 0.25);
  EXPECT_DOUBLE_EQ((*trace)[2].arrival_s, 20);
  EXPECT_DOUBLE_EQ((*trace)[2].duration_s, 0.5);
}

TEST(MigTrace, WrittenTraceReadsBackTheSame) {
  MigTraceOptions options;
  options.hours = 1;
  options.total_gpus = 64;
  auto trace = GenerateMigTrace(options);
  ASSERT_TRUE(trace.ok()) << trace.error().message;
  ASSERT_GT(trace->size(), 10u);
  auto again = ParseMigTrace(MigTraceToText(*trace));
  ASSERT_TRUE(again.ok()) << again.error().message;
  ASSERT_EQ(again->size(), trace->size());
  for (size_t i = 0; i < trace->size(); ++i) {
    EXPECT_EQ((*again)[i].kind, (*trace)[i].kind);
    EXPECT_EQ((*again)[i].gpus, (*trace)[i].gpus);
    EXPECT_EQ((*again)[i].profile, (*trace)[i].profile);
    EXPECT_DOUBLE_EQ((*again)[i].share_compute, (*trace)[i].share_compute);
    EXPECT_DOUBLE_EQ((*again)[i].arrival_s, (*trace)[i].arrival_s);
    EXPECT_DOUBLE_EQ((*again)[i].duration_s, (*trace)[i].duration_s);
  }
}

struct BadTraceLine {
  const char* text;
  const char* expected;
};

class MigTraceRejects : public testing::TestWithParam<BadTraceLine> {};

TEST_P(MigTraceRejects, NamesTheLineAndTheProblem) {
  auto trace = ParseMigTrace(std::string("0,t,mig,1g.10gb,1\n") + GetParam().text + "\n");
  ASSERT_FALSE(trace.ok()) << GetParam().text;
  EXPECT_NE(trace.error().message.find("line 2"), std::string::npos) << trace.error().message;
  EXPECT_NE(trace.error().message.find(GetParam().expected), std::string::npos)
      << trace.error().message;
}

INSTANTIATE_TEST_SUITE_P(Lines, MigTraceRejects,
                         testing::Values(BadTraceLine{"0,t,mig,1g.10gb", "expected 5 fields"},
                                         BadTraceLine{"0,t,mig,1g.10gb,1,extra",
                                                      "expected 5 fields"},
                                         BadTraceLine{"nan,t,mig,1g.10gb,1", "arrival_s"},
                                         BadTraceLine{"-1,t,mig,1g.10gb,1", "arrival_s"},
                                         BadTraceLine{"2e9,t,mig,1g.10gb,1", "arrival_s"},
                                         BadTraceLine{"0x10,t,mig,1g.10gb,1", "arrival_s"},
                                         BadTraceLine{"0,Team,mig,1g.10gb,1", "tenancy"},
                                         BadTraceLine{"0,,mig,1g.10gb,1", "tenancy"},
                                         BadTraceLine{"0,t,vgpu,1,1", "kind"},
                                         BadTraceLine{"0,t,whole,0,1", "GPU count"},
                                         BadTraceLine{"0,t,whole,9,1", "GPU count"},
                                         BadTraceLine{"0,t,whole,1.5,1", "GPU count"},
                                         BadTraceLine{"0,t,mig,1G/10gb,1", "profile name"},
                                         BadTraceLine{"0,t,share,24,1", "MEMORY_GIB:COMPUTE"},
                                         BadTraceLine{"0,t,share,81:0.5,1", "MEMORY_GIB:COMPUTE"},
                                         BadTraceLine{"0,t,share,24:0,1", "MEMORY_GIB:COMPUTE"},
                                         BadTraceLine{"0,t,share,24:1.5,1", "MEMORY_GIB:COMPUTE"},
                                         BadTraceLine{"0,t,mig,1g.10gb,0", "duration_s"},
                                         BadTraceLine{"0,t,mig,1g.10gb,inf", "duration_s"}));

TEST(MigTrace, BoundsLineLengthAndEchoesOnlyAnExcerpt) {
  const std::string long_line = "0,t,mig,1g.10gb,1" + std::string(300, ' ');
  auto too_long = ParseMigTrace(long_line + "\n");
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.error().message.find("longer than 256"), std::string::npos);

  const std::string many_fields(200, ',');
  auto fields = ParseMigTrace(many_fields + "\n");
  ASSERT_FALSE(fields.ok());
  EXPECT_LT(fields.error().message.size(), 160u) << fields.error().message;
}

TEST(MigTraceGenerator, IsDeterministicAndHasTheMix) {
  MigTraceOptions options;
  options.hours = 4;
  options.total_gpus = 160;
  auto a = GenerateMigTrace(options), b = GenerateMigTrace(options);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(MigTraceToText(*a), MigTraceToText(*b));
  options.seed = 42;
  auto c = GenerateMigTrace(options);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(MigTraceToText(*a), MigTraceToText(*c));

  int kinds[3] = {0, 0, 0};
  std::set<std::string> profiles;
  for (const MigTraceRequest& r : *a) {
    ++kinds[static_cast<int>(r.kind)];
    if (r.kind == MigRequestKind::kMig) profiles.insert(r.profile);
    EXPECT_GE(r.arrival_s, 0);
    EXPECT_LT(r.arrival_s, 4 * 3600.0 + 1);
    EXPECT_GT(r.duration_s, 0);
    EXPECT_LE(r.duration_s, options.duration_cap_s);
  }
  EXPECT_GT(kinds[0], 0);
  EXPECT_GT(kinds[1], kinds[0]);
  EXPECT_GT(kinds[2], 0);
  for (const std::string& profile : profiles)
    EXPECT_NE(mig::BuiltinH100Table().FindByName(profile), nullptr) << profile;
  EXPECT_GE(profiles.size(), 5u);
}

TEST(MigTraceGenerator, RejectsOptionsOutOfRange) {
  MigTraceOptions options;
  options.load = 0;
  EXPECT_FALSE(GenerateMigTrace(options).ok());
  options = {};
  options.drift = 2;
  EXPECT_FALSE(GenerateMigTrace(options).ok());
  options = {};
  options.hours = -1;
  EXPECT_FALSE(GenerateMigTrace(options).ok());
}

}  // namespace
}  // namespace tessera::placement

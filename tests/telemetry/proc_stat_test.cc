// /proc/<pid>/stat's start time (field 22): counted after the last ')', whatever the command
// name holds; anything that is not a stat line answers nothing.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "process/process.h"
#include "telemetry/telemetry.h"

namespace tessera::telemetry {
namespace {

TEST(ProcStat, StartTimeIsField22) {
  EXPECT_EQ(StartTicksOfProcStat("4242 (python3) S 1 4242 4242 0 -1 4194560 1234 0 0 0 100 20 0 0 "
                                 "20 0 8 0 987654 123456789 5000 18446744073709551615\n"),
            987654u);
}

TEST(ProcStat, ACommandNameWithSpacesAndParenthesesCannotShiftTheFields) {
  // A process named ") S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 1" would move a
  // parser that splits on the first ')' onto its own numbers.
  EXPECT_EQ(StartTicksOfProcStat("7 () S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 1) R "
                                 "1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 555 0 0\n"),
            555u);
}

TEST(ProcStat, WhatIsNotAStatLineAnswersNothing) {
  for (std::string_view bad :
       {"", "garbage", "1 (a) S 1 2 3", "1 (a) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 x 1",
        "1 (a) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 -5 1", ") 1 2 (",
        "1 (a)  S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20",
        "1 (a) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 99999999999999999999999 1"})
    EXPECT_FALSE(StartTicksOfProcStat(bad)) << bad;
}

TEST(ProcStat, ThisProcessHasAStartTime) {
  std::ifstream in("/proc/self/stat");
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_TRUE(StartTicksOfProcStat(text.str()));
}

}  // namespace
}  // namespace tessera::telemetry

namespace tessera::process {
namespace {

TEST(ProcStat, ReadsTheStateTheParentAndTheStartTimeWhateverTheNameHolds) {
  auto stat = ParseProcStat(
      "4242 (a) b) Z 17 4242 4242 0 -1 4194560 96 0 0 0 0 0 0 0 20 0 1 0 123456 2351104 256\n");
  ASSERT_TRUE(stat);
  EXPECT_EQ(stat->state, 'Z');
  EXPECT_EQ(stat->ppid, 17u);
  EXPECT_EQ(stat->start_time, 123456u);
  EXPECT_FALSE(ParseProcStat("4242 (x) SS 17 1"));
  EXPECT_FALSE(ParseProcStat("4242 (x) S 99999999999 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 1"));
}

}  // namespace
}  // namespace tessera::process

#include <gtest/gtest.h>

#include "health/health.h"

namespace tessera::health {
namespace {

TEST(JudgeState, AClearGpuIsFit) {
  GpuState state;
  state.remap_pending = false;
  state.remap_failure = false;
  state.recovery_action = RecoveryAction::kNone;
  state.uncorrected_volatile_ecc = 0;
  EXPECT_FALSE(JudgeState(state).has_value());
  EXPECT_FALSE(JudgeState(GpuState{}).has_value());  // a board without the fields
}

TEST(JudgeState, PendingWorkAResetCanDoIsUnfitButRetried) {
  GpuState pending;
  pending.remap_pending = true;
  auto unfit = JudgeState(pending);
  ASSERT_TRUE(unfit.has_value());
  EXPECT_TRUE(unfit->reset_helps);

  GpuState lost;
  lost.lost = true;
  ASSERT_TRUE(JudgeState(lost).has_value());

  GpuState action;
  action.recovery_action = RecoveryAction::kGpuReset;
  ASSERT_TRUE(JudgeState(action).has_value());
  EXPECT_TRUE(JudgeState(action)->reset_helps);

  GpuState ecc;
  ecc.uncorrected_volatile_ecc = 2;
  ASSERT_TRUE(JudgeState(ecc).has_value());
}

TEST(JudgeState, WhatNoResetRepairsStaysOut) {
  GpuState failure;
  failure.remap_failure = true;
  ASSERT_TRUE(JudgeState(failure).has_value());
  EXPECT_FALSE(JudgeState(failure)->reset_helps);
  GpuState reboot;
  reboot.recovery_action = RecoveryAction::kNodeReboot;
  ASSERT_TRUE(JudgeState(reboot).has_value());
  EXPECT_FALSE(JudgeState(reboot)->reset_helps);
}

TEST(JudgeSelfTest, AProgramPassesOnExitZero) {
  EXPECT_TRUE(JudgeSelfTest(0, "ok\n", false).passed);
  SelfTestVerdict failed = JudgeSelfTest(3, "step 1\nmemory mismatch at 0x10\n", false);
  EXPECT_FALSE(failed.passed);
  EXPECT_NE(failed.reason.find("exit 3"), std::string::npos);
  EXPECT_NE(failed.reason.find("memory mismatch"), std::string::npos) << failed.reason;
}

constexpr const char* kDiagPass =
    "+---------------------------+------------------------+\n"
    "| Diagnostic                | Result                 |\n"
    "+===========================+========================+\n"
    "|-----  Deployment  --------+------------------------|\n"
    "| Denylist                  | Pass                   |\n"
    "| Page Retirement/Row Remap | Pass                   |\n"
    "| Inforom                   | Skip                   |\n"
    "+---------------------------+------------------------+\n";

TEST(JudgeSelfTest, DcgmDiagOutputIsRead) {
  EXPECT_TRUE(JudgeSelfTest(0, kDiagPass, true).passed);
  std::string failed = kDiagPass;
  failed.replace(failed.find("| Pass  ", failed.find("Page")), 6, "| Fail");
  SelfTestVerdict verdict = JudgeSelfTest(0, failed, true);
  EXPECT_FALSE(verdict.passed);
  EXPECT_NE(verdict.reason.find("Page Retirement"), std::string::npos) << verdict.reason;
}

TEST(JudgeSelfTest, SkipAndNotRunAreNoPass) {
  std::string skipped =
      "| Denylist                  | Skip                   |\n"
      "| Memory                    | Not Run                |\n";
  SelfTestVerdict verdict = JudgeSelfTest(0, skipped, true);
  EXPECT_FALSE(verdict.passed);
  EXPECT_NE(verdict.reason.find("2 skipped"), std::string::npos) << verdict.reason;
  EXPECT_FALSE(JudgeSelfTest(0, "", true).passed);
}

}  // namespace
}  // namespace tessera::health

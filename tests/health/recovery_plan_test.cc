#include <gtest/gtest.h>

#include "health/health.h"

namespace tessera::health {
namespace {

Decision GpuFault(bool reset_allowed = true) {
  Decision decision;
  decision.fault_class = FaultClass::kGpu;
  decision.reach = Reach::kGpu;
  decision.takes_gpu_out = true;
  decision.reset_allowed = reset_allowed;
  decision.action = reset_allowed ? "stop-gpu" : "out";
  decision.reason = "gpu-fault: Xid 79 (GPU has fallen off the bus) on 0000:9d:00.0";
  return decision;
}

Signal At(int64_t ms) {
  Signal signal;
  signal.xid = 79;
  signal.gpu = "0000:9d:00.0";
  signal.at_ms = ms;
  return signal;
}

TEST(Recovery, AFaultWalksEveryStepBackToService) {
  RecoveryPolicy policy;
  policy.firmware_step = true;
  GpuHealth health;
  RecordFault(health, At(100), GpuFault(), policy, 100);
  EXPECT_EQ(health.step, RecoveryStep::kDraining);
  EXPECT_EQ(health.faulted_ms, 100);
  ASSERT_EQ(health.history.size(), 1u);
  EXPECT_EQ(health.history[0].xid, 79u);
  EXPECT_EQ(health.history[0].action, "stop-gpu");
  for (RecoveryStep next :
       {RecoveryStep::kResetting, RecoveryStep::kVerifying, RecoveryStep::kSelfTest,
        RecoveryStep::kFirmware, RecoveryStep::kHealthy}) {
    Advance(health, true, "", policy, 200);
    EXPECT_EQ(health.step, next);
  }
  EXPECT_TRUE(health.in_service());
  EXPECT_EQ(health.faulted_ms, 0);
  EXPECT_EQ(health.history.size(), 1u);  // the history stays
}

TEST(Recovery, WithoutTheFirmwareStepTheSelfTestEndsIt) {
  RecoveryPolicy policy;
  GpuHealth health;
  RecordFault(health, At(1), GpuFault(), policy, 1);
  for (int i = 0; i < 4; ++i)
    Advance(health, true, "", policy, 2);
  EXPECT_EQ(health.step, RecoveryStep::kHealthy);
}

TEST(Recovery, FailedStepsRetryAndThenStayOut) {
  RecoveryPolicy policy;
  policy.max_attempts = 2;
  GpuHealth health;
  RecordFault(health, At(1), GpuFault(), policy, 1);
  Advance(health, true, "", policy, 2);  // drained
  Advance(health, false, "nvidia-smi -r: In use by another client", policy, 3);
  EXPECT_EQ(health.step, RecoveryStep::kResetting);
  EXPECT_EQ(health.attempts, 1);
  Advance(health, true, "", policy, 4);
  Advance(health, false, "a row remap is still pending", policy, 5);
  EXPECT_EQ(health.step, RecoveryStep::kOut);
  EXPECT_NE(health.reason.find("gave up after 2 attempts"), std::string::npos) << health.reason;
  // Nothing moves an out GPU but an operator.
  Advance(health, true, "", policy, 6);
  EXPECT_EQ(health.step, RecoveryStep::kOut);
  Release(health, 7);
  EXPECT_EQ(health.step, RecoveryStep::kHealthy);
  EXPECT_EQ(health.attempts, 0);
}

TEST(Recovery, AVerdictNoResetCanHelpStaysOutAtOnce) {
  RecoveryPolicy policy;
  GpuHealth health;
  RecordFault(health, At(1), GpuFault(), policy, 1);
  Advance(health, true, "", policy, 2);
  Advance(health, true, "", policy, 3);
  Advance(health, false, "row remap failure", policy, 4, /*retry=*/false);
  EXPECT_EQ(health.step, RecoveryStep::kOut);
}

TEST(Recovery, AFaultNoResetCanRepairNeverStartsRecovery) {
  RecoveryPolicy policy;
  GpuHealth health;
  RecordFault(health, At(1), GpuFault(false), policy, 1);
  EXPECT_EQ(health.step, RecoveryStep::kOut);
}

TEST(Recovery, AFaultDuringRecoveryStartsOverAsAFailedAttempt) {
  RecoveryPolicy policy;
  GpuHealth health;
  RecordFault(health, At(1), GpuFault(), policy, 1);
  Advance(health, true, "", policy, 2);
  EXPECT_EQ(health.step, RecoveryStep::kResetting);
  RecordFault(health, At(3), GpuFault(), policy, 3);
  EXPECT_EQ(health.step, RecoveryStep::kDraining);
  EXPECT_EQ(health.attempts, 1);
  EXPECT_EQ(health.history.size(), 2u);
}

TEST(Recovery, TooManyFaultsInTheWindowStayOut) {
  RecoveryPolicy policy;
  policy.max_faults = 3;
  policy.fault_window = std::chrono::hours(1);
  GpuHealth health;
  int64_t t = 0;
  for (int i = 0; i < 2; ++i) {
    RecordFault(health, At(t), GpuFault(), policy, t);
    while (!health.in_service())
      Advance(health, true, "", policy, t);
    t += 60'000;
  }
  RecordFault(health, At(t), GpuFault(), policy, t);
  EXPECT_EQ(health.step, RecoveryStep::kOut);
  EXPECT_NE(health.reason.find("3 faults within the window"), std::string::npos);

  // Spread over more than the window, they do not add up.
  GpuHealth spread;
  for (int i = 0; i < 3; ++i) {
    int64_t at = i * 2 * 3'600'000LL;
    RecordFault(spread, At(at), GpuFault(), policy, at);
    EXPECT_EQ(spread.step, RecoveryStep::kDraining) << i;
    while (!spread.in_service())
      Advance(spread, true, "", policy, at);
  }
}

TEST(Recovery, FaultsThatTakeNothingOutOnlyAddHistoryAndHistoryIsBounded) {
  RecoveryPolicy policy;
  GpuHealth health;
  Decision trend;
  trend.fault_class = FaultClass::kTrend;
  trend.action = "trend";
  for (size_t i = 0; i < kMaxHistory + 10; ++i) {
    RecordFault(health, At(static_cast<int64_t>(i)), trend, policy, static_cast<int64_t>(i));
  }
  EXPECT_TRUE(health.in_service());
  ASSERT_EQ(health.history.size(), kMaxHistory);
  EXPECT_EQ(health.history.back().at_ms, static_cast<int64_t>(kMaxHistory + 9));
  Decision ignored;
  RecordFault(health, At(999), ignored, policy, 999);
  EXPECT_EQ(health.history.back().at_ms, static_cast<int64_t>(kMaxHistory + 9));
}

TEST(Recovery, StepNamesRoundTrip) {
  for (RecoveryStep step : {RecoveryStep::kHealthy, RecoveryStep::kDraining,
                            RecoveryStep::kResetting, RecoveryStep::kVerifying,
                            RecoveryStep::kSelfTest, RecoveryStep::kFirmware, RecoveryStep::kOut}) {
    auto parsed = ParseRecoveryStep(RecoveryStepName(step));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, step);
  }
  EXPECT_FALSE(ParseRecoveryStep("rebooting").ok());
}

}  // namespace
}  // namespace tessera::health

#include <gtest/gtest.h>

#include "health/health.h"

namespace tessera::health {
namespace {

constexpr const char* kGpu = "0000:9d:00.0";

Signal Xid(uint64_t xid, int64_t at_ms = 1000, uint32_t gi = kWholeGpu) {
  Signal signal;
  signal.kind = SignalKind::kXid;
  signal.gpu = kGpu;
  signal.xid = xid;
  signal.gpu_instance_id = gi;
  signal.at_ms = at_ms;
  return signal;
}

TEST(Classifier, AGpuFaultStopsEveryContainerOnTheGpuAndNamesTheXid) {
  Classifier classifier(XidTable::Default());
  Decision decision = classifier.Classify(Xid(79), {"alpha"});
  EXPECT_EQ(decision.fault_class, FaultClass::kGpu);
  EXPECT_EQ(decision.reach, Reach::kGpu);
  EXPECT_TRUE(decision.takes_gpu_out);
  EXPECT_TRUE(decision.reset_allowed);
  EXPECT_EQ(decision.action, "stop-gpu");
  EXPECT_EQ(decision.reason, "gpu-fault: Xid 79 (GPU has fallen off the bus) on 0000:9d:00.0");
}

TEST(Classifier, AnApplicationFaultTouchesNoGpu) {
  Classifier classifier(XidTable::Default());
  Decision decision = classifier.Classify(Xid(13), {"alpha"});
  EXPECT_EQ(decision.fault_class, FaultClass::kApplication);
  EXPECT_EQ(decision.reach, Reach::kNothing);
  EXPECT_FALSE(decision.takes_gpu_out);
  EXPECT_EQ(decision.action, "notify");
  EXPECT_NE(decision.reason.find("Xid 13"), std::string::npos);
}

TEST(Classifier, ApplicationFaultsFromThreeTenanciesWithinAnHourPointAtTheGpu) {
  Classifier classifier(XidTable::Default());
  const int64_t minute = 60'000;
  EXPECT_FALSE(classifier.Classify(Xid(13, 0), {"alpha"}).takes_gpu_out);
  EXPECT_FALSE(classifier.Classify(Xid(31, 10 * minute), {"alpha"}).takes_gpu_out);
  EXPECT_FALSE(classifier.Classify(Xid(43, 20 * minute), {"beta"}).takes_gpu_out);
  Decision third = classifier.Classify(Xid(13, 30 * minute), {"gamma"});
  EXPECT_TRUE(third.takes_gpu_out);
  EXPECT_EQ(third.reach, Reach::kGpu);
  EXPECT_NE(third.reason.find("3 tenancies"), std::string::npos) << third.reason;
}

TEST(Classifier, ApplicationFaultsOutsideTheWindowDoNotAddUp) {
  Classifier classifier(XidTable::Default());
  const int64_t hour = 3'600'000;
  classifier.Classify(Xid(13, 0), {"alpha"});
  classifier.Classify(Xid(13, hour / 2), {"beta"});
  // alpha's fault is more than an hour old by now: two tenancies within the window.
  EXPECT_FALSE(classifier.Classify(Xid(13, hour + hour / 4), {"gamma"}).takes_gpu_out);
  // Another GPU's faults never count for this one.
  Signal other = Xid(13, hour + hour / 3);
  other.gpu = "0000:18:00.0";
  EXPECT_FALSE(classifier.Classify(other, {"delta"}).takes_gpu_out);
}

TEST(Classifier, AContainedErrorStopsOnlyItsInstance) {
  Classifier classifier(XidTable::Default());
  Decision decision = classifier.Classify(Xid(94, 1000, 3), {"alpha"});
  EXPECT_EQ(decision.fault_class, FaultClass::kContained);
  EXPECT_EQ(decision.reach, Reach::kInstance);
  EXPECT_EQ(decision.gpu_instance_id, 3u);
  EXPECT_TRUE(decision.takes_gpu_out);
  EXPECT_EQ(decision.action, "stop-instance");
}

TEST(Classifier, TrendsAndWarningsStopNothing) {
  Classifier classifier(XidTable::Default());
  Decision decision = classifier.Classify(Xid(92), {});
  EXPECT_EQ(decision.reach, Reach::kNothing);
  EXPECT_FALSE(decision.takes_gpu_out);
  EXPECT_EQ(decision.action, "trend");
}

TEST(Classifier, ARemapFailureStaysOut) {
  Classifier classifier(XidTable::Default());
  EXPECT_EQ(classifier.Classify(Xid(64), {}).action, "out");
  Signal failure;
  failure.kind = SignalKind::kRemapFailure;
  failure.gpu = kGpu;
  Decision decision = classifier.Classify(failure, {});
  EXPECT_TRUE(decision.takes_gpu_out);
  EXPECT_FALSE(decision.reset_allowed);
  EXPECT_EQ(decision.reason, "gpu-fault: row remap failure on 0000:9d:00.0");
}

TEST(Classifier, TheRecoveryActionWinsOverTheXid) {
  Classifier classifier(XidTable::Default());
  Signal reboot = Xid(154);
  reboot.recovery_action = RecoveryAction::kNodeReboot;
  Decision decision = classifier.Classify(reboot, {});
  EXPECT_TRUE(decision.takes_gpu_out);
  EXPECT_FALSE(decision.reset_allowed);
  EXPECT_EQ(decision.action, "out");
  EXPECT_NE(decision.reason.find("node-reboot"), std::string::npos) << decision.reason;

  Signal drain = Xid(154);
  drain.recovery_action = RecoveryAction::kDrainAndReset;
  decision = classifier.Classify(drain, {});
  EXPECT_TRUE(decision.takes_gpu_out);
  EXPECT_EQ(decision.reach, Reach::kNothing);  // running work is safe
  EXPECT_EQ(decision.action, "drain");

  // An application Xid the driver wants a reset for is a GPU fault.
  Signal reset = Xid(13);
  reset.recovery_action = RecoveryAction::kGpuReset;
  decision = classifier.Classify(reset, {"alpha"});
  EXPECT_EQ(decision.reach, Reach::kGpu);
  EXPECT_TRUE(decision.reset_allowed);

  Signal none = Xid(79);
  none.recovery_action = RecoveryAction::kNone;
  EXPECT_EQ(classifier.Classify(none, {}).action, "stop-gpu");
}

TEST(Classifier, SignalsWithoutAXidAreGpuFaults) {
  Classifier classifier(XidTable::Default());
  for (SignalKind kind :
       {SignalKind::kGpuLost, SignalKind::kDoubleBitEcc, SignalKind::kRemapPending,
        SignalKind::kAerFatal, SignalKind::kConfigAllOnes, SignalKind::kDeviceGone,
        SignalKind::kFabricFatal, SignalKind::kUncorrectedEcc}) {
    Signal signal;
    signal.kind = kind;
    signal.gpu = kGpu;
    Decision decision = classifier.Classify(signal, {});
    EXPECT_EQ(decision.reach, Reach::kGpu) << SignalKindName(kind);
    EXPECT_TRUE(decision.reset_allowed) << SignalKindName(kind);
  }
}

TEST(Classifier, ANameFromOutsideIsNotEchoedWhole) {
  Classifier classifier(XidTable::Default());
  Signal signal = Xid(79);
  signal.gpu = std::string(500, 'x') + "\n\x01";
  Decision decision = classifier.Classify(signal, {});
  EXPECT_LT(decision.reason.size(), 120u);
  EXPECT_EQ(decision.reason.find('\n'), std::string::npos);
}

}  // namespace
}  // namespace tessera::health

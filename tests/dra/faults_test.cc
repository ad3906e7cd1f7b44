// GPU faults on a DRA node with stand-in reads and commands: the classification into taints
// (NoExecute where work stopped, NoSchedule for a drain, a MIG instance's own), and recovery:
// wait for the claims and processes to go, reset between the monitor's suspend and resume,
// verify, self-test, untaint; a GPU that cannot be repaired keeps its taint.
#include "dra/faults.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace tessera::dra {
namespace {

constexpr const char* kGpu = "0000:9d:00.0";
constexpr int64_t kNow = 1795000000000;

health::Signal Xid(uint64_t xid, uint32_t gpu_instance = health::kWholeGpu) {
  health::Signal signal;
  signal.kind = health::SignalKind::kXid;
  signal.gpu = kGpu;
  signal.xid = xid;
  signal.gpu_instance_id = gpu_instance;
  signal.at_ms = kNow;
  return signal;
}

class Faults : public ::testing::Test {
 protected:
  std::unique_ptr<FaultHandler> Make(FaultOptions options = {}) {
    RecoveryHooks hooks;
    hooks.read_state = [this](const std::string& pci) {
      calls_.push_back("read " + pci);
      return state_;
    };
    hooks.suspend = [this] { calls_.push_back("suspend"); };
    hooks.resume = [this] { calls_.push_back("resume"); };
    hooks.reset = [this](const std::string& pci) -> Status {
      calls_.push_back("reset " + pci);
      if (during_reset_) during_reset_();
      return reset_ok_ ? Ok() : Unavailable("In use by another client");
    };
    if (self_test_) {
      hooks.self_test = [this](const std::string& pci) {
        calls_.push_back("self-test " + pci);
        return *self_test_;
      };
    }
    hooks.claims_holding = [this](const std::string&) { return holders_; };
    return std::make_unique<FaultHandler>(health::XidTable::Default(), options, hooks);
  }
  // Recovery passes until nothing moves (bounded).
  void RecoverAll(FaultHandler& handler) {
    for (int i = 0; i < 20 && handler.Recover(kNow + 1000); ++i) {
    }
  }
  size_t Count(const std::string& call) const {
    return std::count(calls_.begin(), calls_.end(), call);
  }

  health::GpuState state_;
  std::vector<std::string> holders_;
  std::vector<std::string> calls_;
  bool reset_ok_ = true;
  std::optional<health::SelfTestVerdict> self_test_;
  std::function<void()> during_reset_;
};

TEST_F(Faults, Xid79TaintsNoExecuteUntilTheGpuIsResetAndVerified) {
  auto handler = Make();
  holders_ = {"claim-1"};
  health::Decision decision = handler->OnSignal(Xid(79), kNow);
  EXPECT_EQ(decision.action, "stop-gpu");
  auto faults = handler->Faults();
  ASSERT_EQ(faults.count(kGpu), 1u);
  EXPECT_EQ(faults[kGpu].value, "xid-79");
  EXPECT_EQ(faults[kGpu].effect, TaintEffect::kNoExecute);
  EXPECT_EQ(faults[kGpu].since_unix_seconds, kNow / 1000);
  EXPECT_FALSE(faults[kGpu].gpu_instance_id.has_value());
  EXPECT_NE(faults[kGpu].reason.find("fallen off the bus"), std::string::npos);

  // A prepared claim still holds it: no reset.
  RecoverAll(*handler);
  EXPECT_EQ(Count(std::string("reset ") + kGpu), 0u);
  EXPECT_EQ(handler->Records()[kGpu].step, health::RecoveryStep::kDraining);
  // Processes still run on it: no reset either.
  holders_.clear();
  state_.processes = 2;
  RecoverAll(*handler);
  EXPECT_EQ(Count(std::string("reset ") + kGpu), 0u);
  state_.processes = 0;
  RecoverAll(*handler);
  auto reset = std::find(calls_.begin(), calls_.end(), std::string("reset ") + kGpu);
  ASSERT_NE(reset, calls_.end());
  EXPECT_EQ(*(reset - 1), "suspend");
  EXPECT_EQ(*(reset + 1), "resume");
  EXPECT_EQ(handler->Records()[kGpu].step, health::RecoveryStep::kHealthy);
  EXPECT_TRUE(handler->Faults().empty());
  EXPECT_EQ(handler->Records()[kGpu].history.size(), 1u);
}

TEST_F(Faults, ApplicationXidTaintsNothing) {
  auto handler = Make();
  health::Decision decision = handler->OnSignal(Xid(13), kNow);
  EXPECT_EQ(decision.action, "notify");
  EXPECT_TRUE(handler->Faults().empty());
  RecoverAll(*handler);
  EXPECT_TRUE(calls_.empty());
}

TEST_F(Faults, DrainAndResetIsNoSchedule) {
  auto handler = Make();
  health::Signal signal;
  signal.kind = health::SignalKind::kRecoveryAction;
  signal.gpu = kGpu;
  signal.recovery_action = health::RecoveryAction::kDrainAndReset;
  health::Decision decision = handler->OnSignal(signal, kNow);
  EXPECT_EQ(decision.action, "drain");
  auto faults = handler->Faults();
  ASSERT_EQ(faults.count(kGpu), 1u);
  EXPECT_EQ(faults[kGpu].effect, TaintEffect::kNoSchedule);
  EXPECT_EQ(faults[kGpu].value, "recovery-action");
  // A GPU fault while it drains widens the taint to NoExecute.
  handler->OnSignal(Xid(48), kNow + 1);
  EXPECT_EQ(handler->Faults()[kGpu].effect, TaintEffect::kNoExecute);
}

TEST_F(Faults, AContainedErrorTaintsItsInstance) {
  auto handler = Make();
  health::Decision decision = handler->OnSignal(Xid(94, 5), kNow);
  EXPECT_EQ(decision.reach, health::Reach::kInstance);
  auto faults = handler->Faults();
  ASSERT_EQ(faults.count(kGpu), 1u);
  EXPECT_EQ(faults[kGpu].effect, TaintEffect::kNoExecute);
  EXPECT_EQ(faults[kGpu].gpu_instance_id, std::optional<uint32_t>(5));
  // A second instance's fault taints the whole GPU.
  handler->OnSignal(Xid(94, 3), kNow + 1);
  EXPECT_FALSE(handler->Faults()[kGpu].gpu_instance_id.has_value());
}

TEST_F(Faults, AGpuThatCannotBeRepairedKeepsItsTaint) {
  auto handler = Make();
  handler->OnSignal(Xid(79), kNow);
  state_.processes = 0;
  state_.remap_failure = true;  // verification after the reset says RMA
  RecoverAll(*handler);
  EXPECT_EQ(Count(std::string("reset ") + kGpu), 1u);
  EXPECT_EQ(handler->Records()[kGpu].step, health::RecoveryStep::kOut);
  EXPECT_EQ(handler->Faults().count(kGpu), 1u);
  // Xid 64 goes out at once, never reset.
  calls_.clear();
  auto other = Make();
  other->OnSignal(Xid(64), kNow);
  EXPECT_EQ(other->Records()[kGpu].step, health::RecoveryStep::kOut);
  RecoverAll(*other);
  EXPECT_TRUE(calls_.empty());
  EXPECT_EQ(other->Faults().count(kGpu), 1u);
}

TEST_F(Faults, FailedResetsAndSelfTestsRetryThenGiveUp) {
  self_test_ = health::SelfTestVerdict{false, "memory test failed"};
  auto handler = Make();
  handler->OnSignal(Xid(48), kNow);
  RecoverAll(*handler);
  EXPECT_EQ(Count(std::string("self-test ") + kGpu), 3u);
  EXPECT_EQ(handler->Records()[kGpu].step, health::RecoveryStep::kOut);
  EXPECT_NE(handler->Faults()[kGpu].reason.find("memory test failed"), std::string::npos);

  calls_.clear();
  reset_ok_ = false;
  auto failing = Make();
  failing->OnSignal(Xid(48), kNow);
  RecoverAll(*failing);
  EXPECT_EQ(Count(std::string("reset ") + kGpu), 3u);
  EXPECT_EQ(failing->Records()[kGpu].step, health::RecoveryStep::kOut);
}

TEST_F(Faults, AFaultDuringTheResetRestartsRecovery) {
  auto handler = Make();
  handler->OnSignal(Xid(79), kNow);
  bool once = true;
  during_reset_ = [&] {
    if (once) handler->OnSignal(Xid(48), kNow + 5);
    once = false;
  };
  ASSERT_TRUE(handler->Recover(kNow + 10));  // drained
  handler->Recover(kNow + 20);               // the reset, overtaken by the fault
  auto record = handler->Records()[kGpu];
  EXPECT_EQ(record.step, health::RecoveryStep::kDraining);
  EXPECT_EQ(record.attempts, 1);
  RecoverAll(*handler);
  EXPECT_TRUE(handler->Faults().empty());
}

TEST_F(Faults, WithoutRecoveryTheTaintStays) {
  FaultOptions options;
  options.recover = false;
  auto handler = Make(options);
  handler->OnSignal(Xid(79), kNow);
  RecoverAll(*handler);
  EXPECT_TRUE(calls_.empty());
  EXPECT_EQ(handler->Faults().count(kGpu), 1u);
}

// With recovery off the node agent recovers the GPU: the taint goes once it publishes the GPU
// healthy since after the fault (a stale healthy record says nothing), and only once the records
// are persisted; a fault it publishes first taints here as well.
TEST_F(Faults, WithoutRecoveryTheTaintFollowsThePublishedHealth) {
  FaultOptions options;
  options.recover = false;
  RecoveryHooks hooks;
  bool persist_ok = false;
  int persisted = 0;
  hooks.persist = [&](const FaultState&) -> Status {
    ++persisted;
    return persist_ok ? Ok() : Unavailable("disk full");
  };
  FaultHandler handler(health::XidTable::Default(), options, hooks);
  handler.OnSignal(Xid(79), kNow);
  ASSERT_EQ(handler.Faults().count(kGpu), 1u);

  health::GpuHealth stale;  // healthy since before the fault
  stale.step_since_ms = kNow - 1;
  EXPECT_FALSE(handler.Follow({{kGpu, stale}}, kNow + 1000));
  EXPECT_EQ(handler.Faults().count(kGpu), 1u);

  health::GpuHealth repaired;
  repaired.step_since_ms = kNow + 500;
  const int before = persisted;
  EXPECT_FALSE(handler.Follow({{kGpu, repaired}}, kNow + 1000));  // the write failed
  EXPECT_GT(persisted, before);
  EXPECT_EQ(handler.Faults().count(kGpu), 1u);
  persist_ok = true;
  EXPECT_TRUE(handler.Follow({{kGpu, repaired}}, kNow + 1000));
  EXPECT_TRUE(handler.Faults().empty());
  EXPECT_TRUE(handler.Records()[kGpu].in_service());
  EXPECT_FALSE(handler.Follow({{kGpu, repaired}}, kNow + 2000));  // nothing more to do

  // The node agent's fault on another GPU: tainted NoExecute with its Xid; its stale record of
  // the fault this plugin already followed taints nothing.
  const std::string other = "0000:18:00.0";
  health::GpuHealth out;
  out.step = health::RecoveryStep::kResetting;
  out.reason = "Xid 48 (double-bit ECC error)";
  out.faulted_ms = kNow + 3000;
  out.history.push_back({kNow + 3000, "xid", 48, "gpu", "stop-gpu", out.reason});
  health::GpuHealth old = out;
  old.faulted_ms = kNow;
  EXPECT_TRUE(handler.Follow({{other, out}, {kGpu, old}}, kNow + 4000));
  auto faults = handler.Faults();
  ASSERT_EQ(faults.size(), 1u);
  EXPECT_EQ(faults[other].value, "xid-48");
  EXPECT_EQ(faults[other].effect, TaintEffect::kNoExecute);
  EXPECT_EQ(faults[other].since_unix_seconds, (kNow + 3000) / 1000);
  // A hostile signal name still makes a label value.
  health::GpuHealth odd = out;
  odd.history = {{kNow + 3000, "-gpu lost!-", 0, "gpu", "stop-gpu", "lost"}};
  EXPECT_TRUE(handler.Follow({{"0000:19:00.0", odd}}, kNow + 4000));
  EXPECT_EQ(handler.Faults()["0000:19:00.0"].value, "gpulost");
}

TEST(FaultTaintValue, IsALabelValue) {
  health::Signal signal;
  signal.kind = health::SignalKind::kDoubleBitEcc;
  EXPECT_EQ(TaintValue(signal), "double-bit-ecc");
  signal.kind = health::SignalKind::kXid;
  signal.xid = 154;
  EXPECT_EQ(TaintValue(signal), "xid-154");
}

}  // namespace
}  // namespace tessera::dra

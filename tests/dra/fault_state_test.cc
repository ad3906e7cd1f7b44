// The DRA plugin's fault state file: what the handler writes reads back the same; a hostile or
// broken file is refused (never read as "no fault"); restored records keep their taint and
// resume recovery; a recovered GPU is untainted only once the file says so.
#include "dra/fault_state.h"

#include <gtest/gtest.h>

#include "common/atomic_file.h"
#include "dra/faults.h"
#include "support/fixture_host.h"
#include "support/hostile_files.h"

namespace tessera::dra {
namespace {

constexpr const char* kGpu = "0000:9d:00.0";
constexpr int64_t kNow = 1795000000000;

FaultRecord Draining() {
  FaultRecord record;
  record.health.step = health::RecoveryStep::kDraining;
  record.health.reason = "gpu-fault: Xid 79 (GPU has fallen off the bus) on 0000:9d:00.0";
  record.health.step_since_ms = kNow;
  record.health.faulted_ms = kNow;
  record.health.history.push_back({kNow, "xid", 79, "gpu", "stop-gpu", record.health.reason});
  record.taint = DeviceFault{"xid-79", TaintEffect::kNoExecute, kNow / 1000, std::nullopt,
                             record.health.reason};
  return record;
}

std::string Gpu(const std::string& body) {
  return R"({"version":1,"gpus":{"0000:9d:00.0":)" + body + "}}";
}
const std::string kTaint = R"("taint":{"value":"xid-79","effect":"NoExecute","timeAdded":1})";

TEST(FaultState, ReadsBackWhatItWrites) {
  FaultState state{{kGpu, Draining()}};
  FaultRecord mig = Draining();
  mig.health.step = health::RecoveryStep::kOut;
  mig.taint.gpu_instance_id = 5;
  mig.taint.effect = TaintEffect::kNoSchedule;
  state["0000:18:00.0"] = mig;
  FaultRecord healthy;
  healthy.health.history.push_back({kNow, "xid", 13, "application", "notify", "Xid 13"});
  state["0000:3b:00.0"] = healthy;
  auto parsed = ParseFaultState(SerializeFaultState(state));
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  EXPECT_EQ(parsed->at("0000:18:00.0"), mig);
  EXPECT_EQ(parsed->at(kGpu), state[kGpu]);
  EXPECT_EQ(parsed->at("0000:3b:00.0").health, healthy.health);
  EXPECT_TRUE(ParseFaultState(R"({"version":1})")->empty());
}

TEST(FaultState, WritingCutsWhatReadingWouldRefuse) {
  FaultRecord record = Draining();
  record.health.reason = std::string(5000, 'r');
  for (int i = 0; i < 40; ++i)
    record.health.history.push_back({kNow + i, "xid", 79, "gpu", "stop-gpu", "again"});
  auto parsed = ParseFaultState(SerializeFaultState({{kGpu, record}}));
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  EXPECT_EQ(parsed->at(kGpu).health.reason.size(), kMaxFaultStateText);
  EXPECT_EQ(parsed->at(kGpu).health.history.size(), health::kMaxHistory);
  EXPECT_EQ(parsed->at(kGpu).health.history.back().at_ms, kNow + 39);
}

TEST(FaultState, RefusesAHostileOrBrokenFile) {
  std::string entry = R"({"atMs":1,"signal":"xid","xid":79,"class":"gpu","action":"stop-gpu"})";
  std::string long_history;
  for (size_t i = 0; i <= health::kMaxHistory; ++i)
    long_history += (i ? "," : "") + entry;
  std::string many_gpus;
  for (size_t i = 0; i <= kMaxFaultStateGpus; ++i) {
    char pci[16];
    std::snprintf(pci, sizeof pci, "0000:%02zx:%02zx.0", i / 32, i % 32);
    many_gpus += std::string(i ? "," : "") + "\"" + pci + R"(":{"step":"healthy"})";
  }
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"not JSON", "{"},
      {"deep", std::string(100000, '[')},
      {"version", R"({"version":2})"},
      {"unknown top field", R"({"version":1,"extra":0})"},
      {"unknown step", Gpu(R"({"step":"rebooting",)" + kTaint + "}")},
      {"no step", Gpu("{" + kTaint + "}")},
      {"unknown field", Gpu(R"({"step":"out","note":1,)" + kTaint + "}")},
      {"not a PCI address", R"({"version":1,"gpus":{"../../etc":{"step":"healthy"}}})"},
      {"upper-case PCI", R"({"version":1,"gpus":{"0000:9D:00.0":{"step":"healthy"}}})"},
      {"too many GPUs", R"({"version":1,"gpus":{)" + many_gpus + "}}"},
      {"long history", Gpu(R"({"step":"out",)" + kTaint + R"(,"history":[)" + long_history + "]}")},
      {"long reason",
       Gpu(R"({"step":"out","reason":")" + std::string(513, 'x') + "\"," + kTaint + "}")},
      {"negative time", Gpu(R"({"step":"out","stepSinceMs":-1,)" + kTaint + "}")},
      {"attempts", Gpu(R"({"step":"out","attempts":1000000,)" + kTaint + "}")},
      {"out without taint", Gpu(R"({"step":"resetting"})")},
      {"taint value", Gpu(R"({"step":"out","taint":{"value":"a b","effect":"NoExecute"}})")},
      {"taint effect", Gpu(R"({"step":"out","taint":{"value":"x","effect":"PreferNoSchedule"}})")},
      {"instance", Gpu(R"({"step":"out","taint":{"value":"x","effect":"NoExecute",)"
                       R"("gpuInstanceId":4294967295}})")},
      {"history entry", Gpu(R"({"step":"out",)" + kTaint + R"(,"history":[{"xid":"79"}]})")},
  };
  for (const auto& [name, text] : cases) {
    auto parsed = ParseFaultState(text);
    EXPECT_FALSE(parsed.ok()) << name;
    if (!parsed.ok()) {
      EXPECT_FALSE(parsed.error().message.empty()) << name;
    }
  }
  // The bounds themselves are allowed.
  std::string full_history;
  for (size_t i = 0; i < health::kMaxHistory; ++i)
    full_history += (i ? "," : "") + entry;
  EXPECT_TRUE(
      ParseFaultState(Gpu(R"({"step":"out",)" + kTaint + R"(,"history":[)" + full_history + "]}"))
          .ok());
}

TEST(FaultStateFile, AMissingFileIsNoFaultAnythingUnreadableIsAnError) {
  testing::TempDir dir;
  auto missing = ReadFaultStateFile(dir.path() + "/gpu-faults.json");
  ASSERT_TRUE(missing.ok());
  EXPECT_TRUE(missing->empty());
  ASSERT_TRUE(WriteFaultStateFile(dir.path() + "/sub/gpu-faults.json", {{kGpu, Draining()}}).ok());
  auto read = ReadFaultStateFile(dir.path() + "/sub/gpu-faults.json");
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->at(kGpu), Draining());
  ASSERT_TRUE(WriteFileAtomically(dir.path() + "/torn.json", R"({"version":1,"gpus":{)").ok());
  auto torn = ReadFaultStateFile(dir.path() + "/torn.json");
  ASSERT_FALSE(torn.ok());
  EXPECT_NE(torn.error().message.find("torn.json"), std::string::npos);
  testing::HostileFiles hostile(".json");
  for (const auto& file : hostile.all())
    EXPECT_FALSE(ReadFaultStateFile(file.path).ok()) << file.kind;
}

class RestoredFaults : public ::testing::Test {
 protected:
  std::unique_ptr<FaultHandler> Make() {
    RecoveryHooks hooks;
    hooks.read_state = [](const std::string&) { return health::GpuState{}; };
    hooks.reset = [this](const std::string& pci) -> Status {
      resets_.push_back(pci);
      return Ok();
    };
    hooks.claims_holding = [](const std::string&) { return std::vector<std::string>{}; };
    hooks.persist = [this](const FaultState& state) -> Status {
      if (!write_ok_) return Unavailable("disk full");
      written_.push_back(state);
      return Ok();
    };
    return std::make_unique<FaultHandler>(health::XidTable::Default(), FaultOptions{}, hooks);
  }
  void RecoverAll(FaultHandler& handler) {
    for (int i = 0; i < 20 && handler.Recover(kNow + 1000); ++i) {
    }
  }
  std::vector<std::string> resets_;
  std::vector<FaultState> written_;
  bool write_ok_ = true;
};

TEST_F(RestoredFaults, ARestoredFaultKeepsItsTaintAndResumesRecovery) {
  auto handler = Make();
  FaultRecord record = Draining();
  record.health.step = health::RecoveryStep::kResetting;
  handler->Restore({{kGpu, record}});
  auto faults = handler->Faults();
  ASSERT_EQ(faults.count(kGpu), 1u);
  EXPECT_EQ(faults[kGpu].value, "xid-79");
  EXPECT_EQ(faults[kGpu].effect, TaintEffect::kNoExecute);
  EXPECT_EQ(faults[kGpu].since_unix_seconds, kNow / 1000);  // the same timeAdded
  RecoverAll(*handler);
  EXPECT_EQ(resets_, std::vector<std::string>{kGpu});
  EXPECT_TRUE(handler->Faults().empty());
  ASSERT_FALSE(written_.empty());
  EXPECT_TRUE(written_.back().at(kGpu).health.in_service());
}

TEST_F(RestoredFaults, AGpuRestoredOutStaysOut) {
  auto handler = Make();
  FaultRecord record = Draining();
  record.health.step = health::RecoveryStep::kOut;
  handler->Restore({{kGpu, record}});
  RecoverAll(*handler);
  EXPECT_TRUE(resets_.empty());
  EXPECT_EQ(handler->Faults().count(kGpu), 1u);
}

TEST_F(RestoredFaults, TheTaintIsWrittenBeforeItShowsAndKeptWhileTheFileCannotSayRecovered) {
  auto handler = Make();
  health::Signal xid;
  xid.gpu = kGpu;
  xid.xid = 79;
  handler->OnSignal(xid, kNow);
  ASSERT_EQ(written_.size(), 1u);
  EXPECT_EQ(written_[0].at(kGpu).health.step, health::RecoveryStep::kDraining);
  EXPECT_EQ(written_[0].at(kGpu).taint.value, "xid-79");
  write_ok_ = false;
  RecoverAll(*handler);
  EXPECT_EQ(handler->Faults().count(kGpu), 1u);  // verified, but the file still says faulted
  EXPECT_NE(handler->Records()[kGpu].step, health::RecoveryStep::kHealthy);
  write_ok_ = true;
  RecoverAll(*handler);
  EXPECT_TRUE(handler->Faults().empty());
  EXPECT_TRUE(written_.back().at(kGpu).health.in_service());
}

}  // namespace
}  // namespace tessera::dra

// `tessera mig apply` as a process against fixture hosts and the stand-in NVML: the plan of a
// dry run, the exact NVML calls of a real run, nothing on a second run, and refusals.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "support/fake_nvml_state.h"
#include "support/fixture_host.h"
#include "support/podman_harness.h"

namespace {

using tessera::testing::CommandResult;
using tessera::testing::FakeNvmlState;
using tessera::testing::MaterializeHost;
using tessera::testing::RunArgv;
using tessera::testing::TempDir;
using tessera::testing::TesseraBinary;

constexpr const char* kMixedLayout = R"(version: v1
mig-configs:
  balanced:
    - devices: ["0000:18:00.0"]
      mig-enabled: true
      mig-devices: {"3g.40gb": 1, "1g.20gb": 2}
    - devices: [1]
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
  all-disabled:
    - devices: all
      mig-enabled: false
)";

class MigApply : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text) {
    std::string path = dir_.path() + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  CommandResult Apply(const std::string& fixture, std::vector<std::string> flags) {
    std::vector<std::string> argv = {TesseraBinary(),
                                     "mig",
                                     "apply",
                                     "--root",
                                     MaterializeHost(fixture),
                                     "--nvml",
                                     FAKE_NVML,
                                     "--lease-file",
                                     dir_.path() + "/leases.json"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    return RunArgv(argv);
  }
  static size_t Count(const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
      ++n;
    return n;
  }
  TempDir dir_;
};

TEST_F(MigApply, DryRunPrintsThePlanAndMakesNoStateChangingCall) {
  FakeNvmlState nvml("h100-mig-mixed");
  std::string before = nvml.State();
  auto run = Apply("h100-mig-mixed", {"--config", Write("layout.yaml", kMixedLayout), "--select",
                                      "balanced", "--dry-run"});
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_NE(run.output.find("0000:18:00.0: would destroy GPU instance 5\n"), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("0000:18:00.0: would destroy GPU instance 13\n"), std::string::npos);
  EXPECT_NE(run.output.find("0000:18:00.0: would create 1g.20gb (profile 15) at memory slices "
                            "4-5\n"),
            std::string::npos);
  EXPECT_NE(run.output.find("0000:2a:00.0: would enable MIG mode\n"), std::string::npos);
  EXPECT_EQ(Count(run.output, "0000:2a:00.0: would create 1g.10gb (profile 19)"), 7u);
  EXPECT_EQ(nvml.Log(), "");
  EXPECT_EQ(nvml.State(), before);
}

TEST_F(MigApply, ARealRunMakesExactlyTheLayoutsChangesAndASecondRunNone) {
  FakeNvmlState nvml("h100-mig-mixed");
  std::string layout = Write("layout.yaml", kMixedLayout);
  auto run = Apply("h100-mig-mixed", {"--config", layout, "--select", "balanced"});
  ASSERT_EQ(run.status, 0) << run.output;
  std::string expected =
      "nvmlComputeInstanceDestroy 0000:18:00.0 gi=5 ci=0 -> 0\n"
      "nvmlGpuInstanceDestroy 0000:18:00.0 gi=5 -> 0\n"
      "nvmlComputeInstanceDestroy 0000:18:00.0 gi=13 ci=0 -> 0\n"
      "nvmlGpuInstanceDestroy 0000:18:00.0 gi=13 -> 0\n"
      "nvmlDeviceCreateGpuInstanceWithPlacement 0000:18:00.0 profile=15 start=4 size=2 -> 0\n"
      "nvmlGpuInstanceCreateComputeInstance 0000:18:00.0 gi=2 profile=0 -> 0\n"
      "nvmlDeviceCreateGpuInstanceWithPlacement 0000:18:00.0 profile=15 start=6 size=2 -> 0\n"
      "nvmlGpuInstanceCreateComputeInstance 0000:18:00.0 gi=3 profile=0 -> 0\n"
      "nvmlDeviceSetMigMode 0000:2a:00.0 1 -> 0\n";
  for (int i = 0; i < 7; ++i) {
    expected += "nvmlDeviceCreateGpuInstanceWithPlacement 0000:2a:00.0 profile=19 start=" +
                std::to_string(i) + " size=1 -> 0\n";
    expected += "nvmlGpuInstanceCreateComputeInstance 0000:2a:00.0 gi=" + std::to_string(i + 1) +
                " profile=0 -> 0\n";
  }
  EXPECT_EQ(nvml.Log(), expected);
  std::string state = nvml.State();
  EXPECT_NE(state.find("gi 0000:18:00.0 id=1 profile=9 start=0\n"), std::string::npos) << state;
  EXPECT_EQ(Count(state, "gi 0000:18:00.0 "), 3u);
  EXPECT_EQ(Count(state, "gi 0000:2a:00.0 "), 7u);
  EXPECT_NE(state.find("gpu 0000:2a:00.0 board=h100-80gb"), std::string::npos);
  EXPECT_NE(state.find("mig=1 pending=1"), std::string::npos);

  auto again = Apply("h100-mig-mixed", {"--config", layout, "--select", "balanced"});
  ASSERT_EQ(again.status, 0) << again.output;
  EXPECT_EQ(nvml.Log(), expected);  // no new state-changing call
  EXPECT_EQ(Count(again.output, "no change"), 2u) << again.output;
}

TEST_F(MigApply, MigOffTearsDownAndDisables) {
  FakeNvmlState nvml("h100-mig-mixed");
  auto run = Apply("h100-mig-mixed", {"--config", Write("layout.yaml", kMixedLayout), "--select",
                                      "all-disabled", "--gpu", "0000:18:00.0"});
  ASSERT_EQ(run.status, 0) << run.output;
  std::string log = nvml.Log();
  EXPECT_EQ(Count(log, "nvmlGpuInstanceDestroy 0000:18:00.0"), 3u) << log;
  EXPECT_NE(log.find("nvmlDeviceSetMigMode 0000:18:00.0 0 -> 0\n"), std::string::npos) << log;
  EXPECT_EQ(log.find("0000:2a:00.0"), std::string::npos) << log;  // --gpu left it alone
}

TEST_F(MigApply, RefusesAGpuWithRunningProcesses) {
  FakeNvmlState nvml("h100-mig-mixed");
  nvml.Replace("processes=0", "processes=2");
  auto run = Apply("h100-mig-mixed", {"--config", Write("layout.yaml", kMixedLayout), "--select",
                                      "balanced", "--gpu", "0000:18:00.0"});
  EXPECT_NE(run.status, 0);
  EXPECT_NE(run.output.find("0000:18:00.0: refused: 2 process(es) are running"), std::string::npos)
      << run.output;
  EXPECT_EQ(nvml.Log(), "");
}

TEST_F(MigApply, RefusesALeasedGpuButAcceptsALayoutAlreadyInPlaceOnIt) {
  FakeNvmlState nvml("h100-mig-mixed");
  Write("leases.json",
        R"({"version": 1, "gpus": {"0000:2a:00.0": {"state": "active", "tenancy": "t1"}}})");
  std::string layout = Write("layout.yaml", kMixedLayout);
  auto run = Apply("h100-mig-mixed", {"--config", layout, "--select", "balanced"});
  EXPECT_NE(run.status, 0);
  EXPECT_NE(run.output.find("0000:2a:00.0: refused: the GPU has a lease in state active"),
            std::string::npos)
      << run.output;
  EXPECT_EQ(nvml.Log().find("0000:2a:00.0"), std::string::npos) << nvml.Log();
  // The unleased GPU was still changed.
  EXPECT_NE(nvml.Log().find("nvmlGpuInstanceDestroy 0000:18:00.0 gi=5"), std::string::npos);

  Write("leases.json",
        R"({"version": 1, "gpus": {"0000:18:00.0": {"state": "active", "tenancy": "t1"}}})");
  std::string log = nvml.Log();
  auto in_place = Apply("h100-mig-mixed",
                        {"--config", layout, "--select", "balanced", "--gpu", "0000:18:00.0"});
  EXPECT_EQ(in_place.status, 0) << in_place.output;
  EXPECT_EQ(nvml.Log(), log);
}

TEST_F(MigApply, AnNvmlFailureIsNamedAndStopsThatGpu) {
  FakeNvmlState nvml("h100-mig-mixed");
  nvml.Append("fail nvmlDeviceCreateGpuInstanceWithPlacement 23");
  auto run = Apply("h100-mig-mixed", {"--config", Write("layout.yaml", kMixedLayout), "--select",
                                      "balanced", "--gpu", "0000:2a:00.0"});
  EXPECT_NE(run.status, 0);
  EXPECT_NE(run.output.find("nvmlDeviceCreateGpuInstanceWithPlacement failed: NVML error 23 "
                            "(Insufficient Resources)"),
            std::string::npos)
      << run.output;
  EXPECT_EQ(Count(nvml.Log(), "nvmlDeviceCreateGpuInstanceWithPlacement"), 1u) << nvml.Log();
}

TEST_F(MigApply, OtherBoardsNeedTheirProfileTableFile) {
  FakeNvmlState nvml("a100-mig");
  std::string layout = Write("layout.yaml",
                             "version: v1\nmig-configs:\n  seven:\n"
                             "    - devices: all\n      mig-enabled: true\n"
                             "      mig-devices: {\"1g.5gb\": 7}\n");
  auto missing = Apply("a100-mig", {"--config", layout});
  EXPECT_NE(missing.status, 0);
  EXPECT_NE(missing.output.find("no MIG profile table for 10de:20b0"), std::string::npos)
      << missing.output;
  auto run =
      Apply("a100-mig", {"--config", layout, "--profiles",
                         std::string(TESSERA_SOURCE_DIR) + "/data/mig-profiles/a100-40gb.yaml"});
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_EQ(Count(nvml.Log(), "nvmlGpuInstanceDestroy 0000:07:00.0"), 3u) << nvml.Log();
  EXPECT_EQ(Count(nvml.Log(), "nvmlDeviceCreateGpuInstanceWithPlacement 0000:07:00.0 profile=19"),
            7u);
}

}  // namespace

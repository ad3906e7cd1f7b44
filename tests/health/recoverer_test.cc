// The recovery commands against the stand-in nvidia-smi and small scripts: exit status and
// output judged, a time limit, {uuid}, {pci} and {index} filled in.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "health/watch/watch.h"
#include "support/fake_nvml_state.h"
#include "support/fixture_host.h"

namespace tessera::health {
namespace {

using namespace std::chrono_literals;

WatchedGpu Gpu(const std::string& pci, const std::string& uuid) {
  WatchedGpu gpu;
  gpu.pci_address = pci;
  gpu.uuid = uuid;
  return gpu;
}

RecoveryCommands Smi() {
  RecoveryCommands commands;
  commands.reset = {FAKE_NVIDIA_SMI, "-r", "-i", "{uuid}"};
  return commands;
}

TEST(RunReset, RefusedWhileProcessesHoldTheGpuRecordedWhenItSucceeds) {
  testing::FakeNvmlFaults faults;
  faults.SetFaults("0000:65:00.0 uuid=GPU-cccc remap_pending=1 recovery_action=1 processes=2\n");
  Status refused = RunReset(Smi(), Gpu("0000:65:00.0", "GPU-cccc"), 0);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().category, ErrorCategory::kFailedPrecondition);
  EXPECT_NE(refused.error().message.find("In use by another client"), std::string::npos)
      << refused.error().message;
  EXPECT_NE(refused.error().message.find("exit status 1"), std::string::npos);
  EXPECT_NE(faults.Faults().find("remap_pending=1"), std::string::npos);  // nothing applied

  faults.SetFaults("0000:65:00.0 uuid=GPU-cccc remap_pending=1 recovery_action=1 processes=0\n");
  Status reset = RunReset(Smi(), Gpu("0000:65:00.0", "GPU-cccc"), 0);
  ASSERT_TRUE(reset.ok()) << reset.error().message;
  EXPECT_EQ(faults.ResetLog(),
            "reset GPU-cccc 0000:65:00.0 -> 1\nreset GPU-cccc 0000:65:00.0 -> 0\n");
  EXPECT_NE(faults.Faults().find("remap_pending=0"), std::string::npos) << faults.Faults();
  EXPECT_NE(faults.Faults().find("recovery_action=0"), std::string::npos) << faults.Faults();
}

TEST(RunReset, AScriptedFailureTheUuidFallbackAndNoCommand) {
  testing::FakeNvmlFaults faults;
  faults.SetFaults("0000:66:00.0 reset_fail=3\n");
  // Without a UUID the PCI address names the GPU.
  Status failed = RunReset(Smi(), Gpu("0000:66:00.0", ""), 1);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.error().category, ErrorCategory::kUnavailable);
  EXPECT_NE(failed.error().message.find("exit status 3"), std::string::npos);
  EXPECT_EQ(faults.ResetLog(), "reset 0000:66:00.0 0000:66:00.0 -> 3\n");

  RecoveryCommands none;
  none.reset.clear();
  EXPECT_EQ(RunReset(none, Gpu("0000:66:00.0", ""), 1).error().category,
            ErrorCategory::kFailedPrecondition);
  RecoveryCommands missing;
  missing.reset = {"/nonexistent/nvidia-smi", "-r"};
  EXPECT_FALSE(RunReset(missing, Gpu("0000:66:00.0", ""), 1).ok());
}

TEST(RunReset, ATimeLimit) {
  RecoveryCommands slow;
  slow.reset = {"/bin/sh", "-c", "sleep 30"};
  slow.timeout = 200ms;
  Status reset = RunReset(slow, Gpu("0000:65:00.0", "GPU-a"), 0);
  ASSERT_FALSE(reset.ok());
  EXPECT_EQ(reset.error().category, ErrorCategory::kUnavailable);
  EXPECT_NE(reset.error().message.find("no answer within"), std::string::npos);
}

TEST(RunSelfTest, ExitStatusAndGpuFieldsInTheCommand) {
  RecoveryCommands commands;
  EXPECT_TRUE(RunSelfTest(commands, Gpu("0000:65:00.0", "GPU-a"), 0).passed);  // none set
  commands.self_test = {"/bin/sh", "-c",    "test \"$0 $1 $2\" = 'GPU-a 0000:65:00.0 2'",
                        "{uuid}",  "{pci}", "{index}"};
  EXPECT_TRUE(RunSelfTest(commands, Gpu("0000:65:00.0", "GPU-a"), 2).passed);
  commands.self_test = {"/bin/sh", "-c", "echo memory mismatch; exit 1"};
  SelfTestVerdict failed = RunSelfTest(commands, Gpu("0000:65:00.0", "GPU-a"), 2);
  EXPECT_FALSE(failed.passed);
  EXPECT_NE(failed.reason.find("memory mismatch"), std::string::npos) << failed.reason;
  commands.self_test = {"/nonexistent/probe"};
  EXPECT_FALSE(RunSelfTest(commands, Gpu("0000:65:00.0", "GPU-a"), 2).passed);
}

TEST(RunSelfTest, DcgmiDiagOutputIsRead) {
  testing::TempDir dir;
  const std::string dcgmi = dir.path() + "/dcgmi";
  std::ofstream(dcgmi) << "#!/bin/sh\ncat \"$(dirname \"$0\")/diag.out\"\n";
  ::chmod(dcgmi.c_str(), 0755);
  RecoveryCommands commands;
  commands.self_test = {dcgmi, "diag", "-r", "1", "-i", "{index}"};
  std::ofstream(dir.path() + "/diag.out")
      << "+---------------------------+------------------------------------------------+\n"
         "| Diagnostic                | Result                                         |\n"
         "+===========================+================================================+\n"
         "| Deployment                | Pass                                           |\n"
         "| Memory                    | Fail - GPU 0                                   |\n";
  EXPECT_FALSE(RunSelfTest(commands, Gpu("0000:65:00.0", "GPU-a"), 0).passed);
  std::ofstream(dir.path() + "/diag.out")
      << "| Deployment                | Pass                                           |\n"
         "| Memory                    | Pass                                           |\n";
  SelfTestVerdict passed = RunSelfTest(commands, Gpu("0000:65:00.0", "GPU-a"), 0);
  EXPECT_TRUE(passed.passed) << passed.reason;
}

}  // namespace
}  // namespace tessera::health

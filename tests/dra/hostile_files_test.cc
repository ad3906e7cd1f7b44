// tessera-dra-plugin handed hostile files for every file it reads: its --kubeconfig and
// --lease-file, and the checkpoint files under --plugin-dir that it reads at start. /dev/zero,
// a symlink to it, a FIFO and a 2 GiB sparse file are refused at once, by name, under an
// address-space limit; a kubeconfig alias bomb too. Planted checkpoints are dropped, not a
// reason to crash on every start.
#include "support/hostile_files.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "deviceplugin/plugin_process.h"
#include "dra/dra_kubelet.h"
#include "support/fixture_host.h"
#include "support/wait.h"

namespace tessera::testing {
namespace {

class DraPluginFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    // An API server nobody answers on: these tests never get that far, or need not.
    kubeconfig_ = dir_.path() + "/kubeconfig";
    std::ofstream(kubeconfig_) << "apiVersion: v1\nkind: Config\ncurrent-context: t\nclusters:\n"
                                  "- name: c\n  cluster:\n    server: http://127.0.0.1:9\n"
                                  "contexts:\n- name: t\n  context: {cluster: c}\n";
    std::filesystem::create_directories(PluginDir() + "/prepared");
  }
  std::string PluginDir() const { return dir_.path() + "/plugin"; }
  std::string LeaseFile() const { return dir_.path() + "/leases.json"; }
  std::vector<std::string> Args(const std::string& kubeconfig) const {
    return {DraPluginBinary(),
            "--node-name",
            "node-a",
            "--root",
            root_,
            "--kubeconfig",
            kubeconfig,
            "--registry-dir",
            dir_.path() + "/registry",
            "--plugin-dir",
            PluginDir(),
            "--cdi-dir",
            dir_.path() + "/cdi",
            "--lease-file",
            LeaseFile(),
            "--nvml",
            "",
            "--poll-ms",
            "100"};
  }

  std::string root_ = MaterializeHost("hgx-h100-dgx");
  TempDir dir_;
  std::string kubeconfig_;
};

TEST_F(DraPluginFiles, AHostileKubeconfigIsRefusedAtOnceNamingIt) {
  HostileFiles hostile;
  for (const auto& file : hostile.all()) {
    LimitedRun run = RunUnderLimits(Args(file.path));
    EXPECT_EQ(RefusalProblem(run, file.path, ReasonFor(file)), "") << file.kind;
  }
  const std::string bomb = dir_.path() + "/bomb.kubeconfig";
  std::ofstream(bomb) << AliasBomb("apiVersion: v1\nkind: Config\ncurrent-context: t\n",
                                   "clusters");
  LimitedRun run = RunUnderLimits(Args(bomb));
  EXPECT_EQ(RefusalProblem(run, "kubeconfig", "more than 100000 nodes with its aliases expanded"),
            "");
  EXPECT_EQ(run.exit_code, 2);
}

TEST_F(DraPluginFiles, PlantedCheckpointsAreDroppedAndAHostileLeaseFileIsIgnored) {
  // Claim files a previous run would have written, each replaced by a hostile file, and the
  // checkpoint.json of an earlier version as a FIFO.
  const std::vector<std::string> kinds = {"/dev/zero", "FIFO", "2 GiB sparse file"};
  std::vector<std::string> planted;
  for (size_t i = 0; i < kinds.size(); ++i) {
    planted.push_back(PluginDir() + "/prepared/claim_0000000" + std::to_string(i) +
                      "-0000-4000-8000-000000000000.json");
    HostileFiles::Make(kinds[i], planted.back());
  }
  HostileFiles::Make("FIFO", PluginDir() + "/checkpoint.json");
  HostileFiles::Make("symlink to /dev/zero", LeaseFile());

  std::vector<std::string> args = Args(kubeconfig_);
  args.erase(args.begin());
  PluginProcess plugin(DraPluginBinary(), args, dir_.path() + "/log", kHostileFileAddressSpace);
  DraKubelet kubelet(dir_.path() + "/registry", "gpu.tessera.dev");
  ASSERT_EQ(kubelet.Register(std::chrono::seconds(60)), "") << plugin.Log();
  const std::string log = plugin.Log();
  for (size_t i = 0; i < planted.size(); ++i) {
    const std::string reason = kinds[i] == "FIFO"                ? "a FIFO, not a regular file"
                               : kinds[i] == "2 GiB sparse file" ? "larger than 1048576 bytes"
                                                                 : "a character device";
    EXPECT_NE(log.find(planted[i] + ": " + reason), std::string::npos) << kinds[i] << "\n" << log;
    EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(planted[i])))
        << planted[i] << " is dropped";
  }
  EXPECT_NE(log.find(PluginDir() + "/checkpoint.json: a FIFO, not a regular file"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find(LeaseFile() + ": a character device, not a regular file"), std::string::npos)
      << log;
  // The lease file again, as a FIFO, then a sparse file: each named, the plugin still serving.
  for (const char* kind : {"FIFO", "2 GiB sparse file"}) {
    const std::string staged = dir_.path() + "/staged";
    HostileFiles::Make(kind, staged);
    ASSERT_EQ(::rename(staged.c_str(), LeaseFile().c_str()), 0);
    const std::string reason =
        std::string(kind) == "FIFO" ? "a FIFO, not a regular file" : "larger than 1048576 bytes";
    EXPECT_TRUE(WaitUntil([&] {
      return plugin.Log().find(LeaseFile() + ": " + reason) != std::string::npos;
    })) << plugin.Log();
  }
  std::string rpc_error;
  kubelet.Unprepare({{"team", "gone", "00000000-0000-4000-8000-000000000000"}}, &rpc_error);
  EXPECT_EQ(rpc_error, "");
  EXPECT_EQ(plugin.Stop(), 0) << plugin.Log();
}

}  // namespace
}  // namespace tessera::testing

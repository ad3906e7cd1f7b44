// tessera-device-plugin handed hostile files for every file it reads: /dev/zero, a symlink to
// it, a FIFO and a 2 GiB sparse file, and a billion-laughs YAML. It refuses each at once, naming
// it, under an address-space limit that reading any of them whole would exceed.
#include "support/hostile_files.h"

#include <gtest/gtest.h>
#include <stdio.h>

#include <filesystem>
#include <fstream>

#include "deviceplugin/plugin_process.h"
#include "support/fixture_host.h"
#include "support/wait.h"

namespace tessera::testing {
namespace {

class DevicePluginFiles : public ::testing::Test {
 protected:
  std::vector<std::string> Args(const std::vector<std::string>& extra) const {
    std::vector<std::string> args = {
        DevicePluginBinary(), "--root",       root_,
        "--socket-dir",       dir_.path(),    "--cdi-dir",
        dir_.path() + "/cdi", "--lease-file", dir_.path() + "/leases.json"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }

  std::string root_ = MaterializeHost("hgx-h100-dgx");
  TempDir dir_;
};

TEST_F(DevicePluginFiles, EveryFileFlagRefusesHostileFilesAtOnceNamingThem) {
  HostileFiles yaml(".yaml"), json(".json");
  for (const char* flag : {"--config", "--partition-table", "--windows-snapshot", "--fault-table",
                           "--health-state-file"}) {
    const bool is_json =
        std::string(flag) == "--windows-snapshot" || std::string(flag) == "--health-state-file";
    const auto& files = is_json ? json : yaml;
    for (const auto& file : files.all()) {
      LimitedRun run = RunUnderLimits(Args({flag, file.path}));
      EXPECT_EQ(RefusalProblem(run, file.path, ReasonFor(file)), "") << flag << " " << file.kind;
      EXPECT_EQ(run.exit_code, 2) << flag << " " << file.kind;
    }
  }
}

TEST_F(DevicePluginFiles, AliasBombsInTheConfigAndThePartitionTableAreRefused) {
  const std::string config = dir_.path() + "/config.yaml";
  std::ofstream(config) << AliasBomb("version: v1\n", "resources");
  LimitedRun run = RunUnderLimits(Args({"--config", config}));
  EXPECT_EQ(RefusalProblem(run, config, "more than 100000 nodes with its aliases expanded"), "");
  EXPECT_EQ(run.exit_code, 2);

  const std::string table = dir_.path() + "/table.yaml";
  std::ofstream(table) << AliasBomb("board: hgx\nmodules: 8\n", "partitions");
  run = RunUnderLimits(Args({"--partition-table", table}));
  EXPECT_EQ(RefusalProblem(run, table, "more than 100000 nodes with its aliases expanded"), "");
  EXPECT_EQ(run.exit_code, 2);
}

TEST_F(DevicePluginFiles, AHostileLeaseFileIsIgnoredByNameAndThePluginRunsOn) {
  // The lease file is read at start and on every change: each kind in its place in turn.
  const std::string leases = dir_.path() + "/leases.json";
  HostileFiles::Make("symlink to /dev/zero", leases);
  // NVML is absent on test machines; a path that cannot load keeps the host out of it.
  const std::string config = dir_.path() + "/config.yaml";
  std::ofstream(config) << "health:\n  nvmlLibrary: " << dir_.path() << "/no-libnvidia-ml.so.1\n";
  std::vector<std::string> args = Args({"--config", config});
  args.erase(args.begin());
  PluginProcess plugin(DevicePluginBinary(), args, dir_.path() + "/log", kHostileFileAddressSpace);
  auto logged = [&](const std::string& text) {
    return WaitUntil([&] { return plugin.Log().find(text) != std::string::npos; });
  };
  EXPECT_TRUE(logged("lease file ignored: " + leases + ": a character device, not a regular file"))
      << plugin.Log();
  for (const char* kind : {"FIFO", "2 GiB sparse file"}) {
    const std::string staged = dir_.path() + "/staged";
    HostileFiles::Make(kind, staged);
    ASSERT_EQ(::rename(staged.c_str(), leases.c_str()), 0);
    const std::string reason =
        std::string(kind) == "FIFO" ? "a FIFO, not a regular file" : "larger than 1048576 bytes";
    EXPECT_TRUE(logged("lease file ignored: " + leases + ": " + reason)) << plugin.Log();
  }
  EXPECT_EQ(plugin.Stop(), 0) << plugin.Log();
}

}  // namespace
}  // namespace tessera::testing

// tessera-serve handed hostile files as --partition-table and --admin-token-file: /dev/zero,
// a symlink to it, a FIFO and a 2 GiB sparse file, and a billion-laughs partition table, each
// refused at once with a message naming it, under an address-space limit.
#include "support/hostile_files.h"

#include <gtest/gtest.h>

#include <fstream>

#include "support/fixture_host.h"

namespace tessera::testing {
namespace {

class ServeFiles : public ::testing::Test {
 protected:
  std::vector<std::string> Args(const std::string& flag, const std::string& path) const {
    return {std::string(TESSERA_BINARY_DIR) + "/src/cli/tessera-serve",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            dir_.path() + "/data",
            "--root",
            root_,
            "--backend",
            "null",
            "--cdi-dir",
            dir_.path() + "/cdi",
            flag,
            path};
  }

  std::string root_ = MaterializeHost("hgx-h100-dgx");
  TempDir dir_;
};

TEST_F(ServeFiles, HostilePartitionTablesAndAdminTokenFilesAreRefusedAtOnceNamingThem) {
  HostileFiles yaml(".yaml");
  for (const char* flag : {"--partition-table", "--admin-token-file"}) {
    for (const auto& file : yaml.all()) {
      LimitedRun run = RunUnderLimits(Args(flag, file.path));
      EXPECT_EQ(RefusalProblem(run, file.path, ReasonFor(file)), "") << flag << " " << file.kind;
      EXPECT_EQ(run.exit_code, 2) << flag << " " << file.kind;
    }
  }
}

TEST_F(ServeFiles, AnAliasBombPartitionTableIsRefused) {
  const std::string table = dir_.path() + "/table.yaml";
  std::ofstream(table) << AliasBomb("board: hgx\nmodules: 8\n", "partitions");
  LimitedRun run = RunUnderLimits(Args("--partition-table", table));
  EXPECT_EQ(RefusalProblem(run, table, "more than 100000 nodes with its aliases expanded"), "");
  EXPECT_EQ(run.exit_code, 2);
}

}  // namespace
}  // namespace tessera::testing

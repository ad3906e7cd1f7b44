// `tessera windows ... --snapshot` handed hostile files: /dev/zero, a symlink to it, a FIFO and
// a 2 GiB sparse file are refused at once by every subcommand that reads a snapshot, naming the
// file, under an address-space limit.
#include "support/hostile_files.h"

#include <gtest/gtest.h>

#include "support/fixture_host.h"

namespace tessera::testing {
namespace {

TEST(WindowsHostileFiles, EverySnapshotReaderRefusesThemAtOnceNamingThem) {
  HostileFiles json(".json");
  const std::vector<std::vector<std::string>> commands = {
      {"windows", "inventory"},
      {"windows", "hcs-device", "--device", "class/5B45201D-F2F2-4F3B-85BB-30FF1F953599"},
      {"windows", "mounts", "--index", "0", "--format", "docker"}};
  for (const auto& command : commands) {
    for (const auto& file : json.all()) {
      std::vector<std::string> argv = {TesseraBinary()};
      argv.insert(argv.end(), command.begin(), command.end());
      argv.push_back("--snapshot");
      argv.push_back(file.path);
      LimitedRun run = RunUnderLimits(argv);
      EXPECT_EQ(RefusalProblem(run, file.path, ReasonFor(file)), "")
          << command[1] << " " << file.kind;
    }
  }
}

}  // namespace
}  // namespace tessera::testing

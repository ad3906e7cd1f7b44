// `tessera cdi validate` handed hostile files, as arguments and inside a spec directory (a
// runtime reads every .json/.yaml there): /dev/zero, a symlink to it, a FIFO, a 2 GiB sparse
// file and a billion-laughs spec are each a problem line naming the file, at once, under an
// address-space limit, and the good spec beside them is still checked.
#include "support/hostile_files.h"

#include <gtest/gtest.h>

#include <fstream>

#include "support/fixture_host.h"

namespace tessera::testing {
namespace {

constexpr const char* kGoodSpec = R"({"cdiVersion":"0.3.0","kind":"vendor.com/gpu","devices":[)"
                                  R"({"name":"gpu0","containerEdits":{"env":["A=1"]}}]})";

TEST(CdiValidateHostileFiles, EachIsAProblemNamingItAsAnArgument) {
  HostileFiles yaml(".yaml");
  for (const auto& file : yaml.all()) {
    LimitedRun run = RunUnderLimits({TesseraBinary(), "cdi", "validate", file.path});
    EXPECT_EQ(RefusalProblem(run, file.path, ReasonFor(file)), "") << file.kind;
    EXPECT_EQ(run.exit_code, 1) << file.kind;
  }
}

TEST(CdiValidateHostileFiles, EachIsAProblemNamingItInsideASpecDirectory) {
  TempDir dir;
  std::ofstream(dir.path() + "/good.json") << kGoodSpec;
  std::vector<std::pair<std::string, std::string>> planted;
  for (const char* kind : {"symlink to /dev/zero", "FIFO", "2 GiB sparse file"}) {
    std::string path = dir.path() + "/" + std::string(kind).substr(0, 4) + ".yaml";
    for (char& c : path)
      if (c == ' ') c = '-';
    HostileFiles::Make(kind, path);
    planted.emplace_back(path, ReasonFor({kind, path}));
  }
  const std::string bomb = dir.path() + "/bomb.yaml";
  std::ofstream(bomb) << AliasBomb("cdiVersion: \"0.5.0\"\nkind: vendor.com/gpu\n", "devices");
  planted.emplace_back(bomb, "more than 1048576 nodes with its aliases expanded");

  LimitedRun run = RunUnderLimits({TesseraBinary(), "cdi", "validate", dir.path()});
  for (const auto& [path, reason] : planted)
    EXPECT_EQ(RefusalProblem(run, path, reason), "") << path;
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(run.output.find(dir.path() + "/good.json"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace tessera::testing

// `tessera mig apply` handed hostile files as --config, --profiles and --lease-file: /dev/zero,
// a symlink to it, a FIFO and a 2 GiB sparse file are refused at once, naming the file, under an
// address-space limit; billion-laughs layouts and profile tables too. Nothing is applied.
#include "support/hostile_files.h"

#include <gtest/gtest.h>

#include <fstream>

#include "support/fixture_host.h"

namespace tessera::testing {
namespace {

constexpr const char* kLayout = R"(version: v1
mig-configs:
  all-1g:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
)";

class MigHostileFiles : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text) {
    std::string path = dir_.path() + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  LimitedRun Apply(const std::vector<std::string>& flags) {
    // NVML names a library that cannot load: every run here must stop before touching GPUs.
    std::vector<std::string> argv = {TesseraBinary(), "mig",
                                     "apply",         "--dry-run",
                                     "--root",        MaterializeHost("hgx-h100-dgx"),
                                     "--nvml",        dir_.path() + "/no-libnvidia-ml.so.1"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    return RunUnderLimits(argv);
  }
  TempDir dir_;
};

TEST_F(MigHostileFiles, EveryFileFlagRefusesThemAtOnceNamingThem) {
  const std::string layout = Write("layout.yaml", kLayout);
  const std::string leases = dir_.path() + "/leases.json";
  HostileFiles yaml(".yaml");
  for (const auto& file : yaml.all()) {
    for (const auto& flags : std::vector<std::vector<std::string>>{
             {"--config", file.path, "--lease-file", leases},
             {"--config", layout, "--profiles", file.path, "--lease-file", leases},
             {"--config", layout, "--lease-file", file.path}}) {
      LimitedRun run = Apply(flags);
      EXPECT_EQ(RefusalProblem(run, file.path, ReasonFor(file)), "")
          << flags[flags.size() - 2] << " " << file.kind;
    }
  }
}

TEST_F(MigHostileFiles, AliasBombLayoutsAndProfileTablesAreRefused) {
  const std::string reason = "more than 100000 nodes with its aliases expanded";
  const std::string layout = Write("bomb-layout.yaml", AliasBomb("version: v1\n", "mig-configs"));
  LimitedRun run = Apply({"--config", layout});
  EXPECT_EQ(RefusalProblem(run, layout, reason), "");
  const std::string profiles = Write(
      "bomb-profiles.yaml", AliasBomb("board: x\npci_device_ids: [\"10de:2330\"]\n", "profiles"));
  run = Apply({"--config", Write("layout.yaml", kLayout), "--profiles", profiles});
  EXPECT_EQ(RefusalProblem(run, profiles, reason), "");
}

}  // namespace
}  // namespace tessera::testing

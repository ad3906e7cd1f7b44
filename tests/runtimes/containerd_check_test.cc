// containerd config checks: each config seeds one problem and must get its verdict; the
// configs `tessera runtime-config` prints must pass every check.
#include <gtest/gtest.h>

#include <map>

#include "runtimes/runtimes.h"

namespace tessera::runtimes {
namespace {

const Check* Find(const std::vector<Check>& checks, const std::string& id) {
  for (const auto& c : checks) {
    if (c.id == id) return &c;
  }
  return nullptr;
}

ContainerdCheckResult RunChecks(const std::string& text,
                                std::optional<std::string> containerd = "1.7.20",
                                std::map<std::string, std::string> files = {}) {
  ContainerdCheckInput input;
  input.config_path = "/etc/containerd/config.toml";
  input.config_text = text;
  if (containerd) input.containerd_version = Version::Parse(*containerd);
  input.read_file = [files](const std::string& path) -> std::optional<std::string> {
    auto it = files.find(path);
    if (it == files.end()) return std::nullopt;
    return it->second;
  };
  return CheckContainerdConfig(input);
}

Verdict VerdictOf(const ContainerdCheckResult& result, const std::string& id) {
  const Check* check = Find(result.checks, id);
  EXPECT_NE(check, nullptr) << "no check " << id;
  return check ? check->verdict : Verdict::kPass;
}

TEST(RuntimeConfig, PrintedConfigsPassEveryCheck) {
  for (Runtime runtime : {Runtime::kRunc, Runtime::kGvisor, Runtime::kKata}) {
    ContainerdConfigOptions options;
    options.runtime = runtime;
    auto result =
        RunChecks(ContainerdConfig(options), "1.7.20", {{options.runsc_config_path, RunscToml()}});
    ASSERT_TRUE(result.facts) << RuntimeName(runtime);
    ASSERT_EQ(result.facts->runtimes.size(), 1u);
    EXPECT_EQ(KindOf(result.facts->runtimes[0]), runtime);
    EXPECT_EQ(result.facts->enable_cdi, true);
    EXPECT_EQ(result.facts->cdi_spec_dirs, (std::vector<std::string>{"/etc/cdi", "/var/run/cdi"}));
    for (const auto& check : result.checks)
      EXPECT_EQ(check.verdict, Verdict::kPass) << check.id << ": " << check.evidence;
  }
}

TEST(RuntimeConfig, GvisorAndKataCarryTheDocumentedKeys) {
  ContainerdConfigOptions options;
  options.runtime = Runtime::kGvisor;
  std::string gvisor = ContainerdConfig(options);
  EXPECT_NE(gvisor.find("runtime_type = \"io.containerd.runsc.v1\""), std::string::npos);
  EXPECT_NE(gvisor.find("TypeUrl = \"io.containerd.runsc.v1.options\""), std::string::npos);
  EXPECT_NE(gvisor.find("ConfigPath = \"/etc/containerd/runsc.toml\""), std::string::npos);
  EXPECT_NE(RunscToml().find("nvproxy = \"true\""), std::string::npos);
  options.runtime = Runtime::kKata;
  std::string kata = ContainerdConfig(options);
  EXPECT_NE(kata.find("runtime_type = \"io.containerd.kata-qemu-nvidia-gpu.v2\""),
            std::string::npos);
  EXPECT_NE(kata.find("pod_annotations = [\"io.katacontainers.*\"]"), std::string::npos);
  EXPECT_NE(kata.find("ConfigPath = "), std::string::npos);
  std::string podman = PodmanContainersConf(Runtime::kGvisor, options);
  EXPECT_NE(podman.find("[engine.runtimes]"), std::string::npos);
  EXPECT_NE(podman.find("runsc = ["), std::string::npos);
}

constexpr const char* kRuncShimOnRunsc = R"(version = 2
[plugins."io.containerd.grpc.v1.cri"]
  enable_cdi = true
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc.options]
  BinaryName = "/usr/local/bin/runsc"
  ConfigPath = "/etc/containerd/runsc.toml"
)";

TEST(ContainerdCheck, RuncShimDrivingRunscFails) {
  auto result =
      RunChecks(kRuncShimOnRunsc, "1.7.20", {{"/etc/containerd/runsc.toml", RunscToml()}});
  const Check* check = Find(result.checks, "containerd.runtime_type.runsc");
  ASSERT_NE(check, nullptr);
  EXPECT_EQ(check->verdict, Verdict::kFail);
  EXPECT_NE(check->evidence.find("hang"), std::string::npos);
  EXPECT_NE(check->fix.find("io.containerd.runsc.v1"), std::string::npos);
}

constexpr const char* kRunscNoConfigPath = R"(version = 2
[plugins."io.containerd.grpc.v1.cri"]
  enable_cdi = true
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc]
  runtime_type = "io.containerd.runsc.v1"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc.options]
  TypeUrl = "io.containerd.runsc.v1.options"
)";

TEST(ContainerdCheck, RunscWithoutNvproxyFails) {
  EXPECT_EQ(VerdictOf(RunChecks(kRunscNoConfigPath), "gvisor.nvproxy.runsc"), Verdict::kFail);
  std::string with_path = std::string(kRunscNoConfigPath) + "  ConfigPath = \"/etc/runsc.toml\"\n";
  // Named file missing, nvproxy off, nvproxy on.
  EXPECT_EQ(VerdictOf(RunChecks(with_path), "gvisor.nvproxy.runsc"), Verdict::kFail);
  EXPECT_EQ(VerdictOf(RunChecks(with_path, "1.7.20",
                                {{"/etc/runsc.toml", "[runsc_config]\n  nvproxy = \"false\"\n"}}),
                      "gvisor.nvproxy.runsc"),
            Verdict::kFail);
  EXPECT_EQ(VerdictOf(RunChecks(with_path, "1.7.20",
                                {{"/etc/runsc.toml", "[runsc_config]\ndebug = \"true\"\n"}}),
                      "gvisor.nvproxy.runsc"),
            Verdict::kFail);
  EXPECT_EQ(VerdictOf(RunChecks(with_path, "1.7.20", {{"/etc/runsc.toml", RunscToml()}}),
                      "gvisor.nvproxy.runsc"),
            Verdict::kPass);
}

constexpr const char* kNoCdi = R"(version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
)";

TEST(ContainerdCheck, CdiNotEnabledOnContainerd17Fails) {
  EXPECT_EQ(VerdictOf(RunChecks(kNoCdi, "1.7.20"), "containerd.cdi"), Verdict::kFail);
  // containerd 2.0 enables CDI by default.
  EXPECT_EQ(VerdictOf(RunChecks(kNoCdi, "2.0.0"), "containerd.cdi"), Verdict::kPass);
  // Unknown version with a version-2 config: a warning, not a verdict we cannot back.
  EXPECT_EQ(VerdictOf(RunChecks(kNoCdi, std::nullopt), "containerd.cdi"), Verdict::kWarn);
}

TEST(ContainerdCheck, OldContainerdWithCdiExpectationsFails) {
  std::string with_cdi =
      std::string(kNoCdi) + "[plugins.\"io.containerd.grpc.v1.cri\"]\n  enable_cdi = true\n";
  auto result = RunChecks(with_cdi, "1.6.24");
  EXPECT_EQ(VerdictOf(result, "containerd.cdi"), Verdict::kFail);
  EXPECT_NE(Find(result.checks, "containerd.cdi")->evidence.find("1.6.24"), std::string::npos);
  // CDI specs on the host count as an expectation too.
  ContainerdCheckInput input;
  input.config_path = "c.toml";
  input.config_text = kNoCdi;
  input.containerd_version =
      Version::Parse("containerd github.com/containerd/containerd v1.6.24 x");
  input.cdi_specs_present = true;
  EXPECT_EQ(Find(CheckContainerdConfig(input).checks, "containerd.cdi")->verdict, Verdict::kFail);
  input.cdi_specs_present = false;
  EXPECT_EQ(Find(CheckContainerdConfig(input).checks, "containerd.cdi")->verdict, Verdict::kWarn);
}

TEST(ContainerdCheck, KataWithoutPodAnnotationsWarns) {
  constexpr const char* kata = R"(version = 2
[plugins."io.containerd.grpc.v1.cri"]
  enable_cdi = true
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.kata-qemu-nvidia-gpu]
  runtime_type = "io.containerd.kata-qemu-nvidia-gpu.v2"
)";
  EXPECT_EQ(VerdictOf(RunChecks(kata), "kata.pod_annotations.kata-qemu-nvidia-gpu"),
            Verdict::kWarn);
}

TEST(ContainerdCheck, ContainerdTwoConfigIsRead) {
  constexpr const char* v3 = R"(version = 3
[plugins."io.containerd.cri.v1.runtime"]
  enable_cdi = false
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runsc]
  runtime_type = "io.containerd.runsc.v1"
)";
  auto result = RunChecks(v3, "2.0.2");
  ASSERT_TRUE(result.facts);
  EXPECT_EQ(result.facts->config_version, 3);
  EXPECT_EQ(VerdictOf(result, "containerd.cdi"), Verdict::kFail);  // switched off explicitly
  EXPECT_EQ(VerdictOf(result, "gvisor.nvproxy.runsc"), Verdict::kFail);
}

TEST(ContainerdCheck, BrokenTomlFailsWithTheLine) {
  auto result = RunChecks("version = 2\n[plugins\nfoo = 1\n");
  ASSERT_EQ(result.checks.size(), 1u);
  EXPECT_EQ(result.checks[0].verdict, Verdict::kFail);
  EXPECT_NE(result.checks[0].evidence.find("/etc/containerd/config.toml:2"), std::string::npos)
      << result.checks[0].evidence;
  EXPECT_FALSE(result.facts);
}

TEST(ContainerdCheck, NonAsciiTextIsSafe) {
  // A comment in French and a BOM still parse; a stray non-ASCII character outside strings is a
  // parse FAIL (toml++ 3.3.0 would reach __builtin_unreachable on "o" U+2EFF).
  std::string commented = "\xEF\xBB\xBF# configur\xC3\xA9 pour les GPU\n" + std::string(kNoCdi);
  auto ok = RunChecks(commented, "2.0.0");
  ASSERT_TRUE(ok.facts);
  EXPECT_EQ(ok.facts->runtimes.size(), 1u);
  auto bad = RunChecks("o\xE2\xBB\xBF");
  ASSERT_EQ(bad.checks.size(), 1u);
  EXPECT_EQ(bad.checks[0].verdict, Verdict::kFail);
}

TEST(Version, ParsesToolOutputs) {
  EXPECT_EQ(Version::Parse("podman version 4.3.1")->ToString(), "4.3.1");
  EXPECT_EQ(
      Version::Parse("containerd github.com/containerd/containerd/v2 v2.0.0 207ad7")->ToString(),
      "2.0.0");
  EXPECT_EQ(Version::Parse("6.1.0-18-amd64")->ToString(), "6.1.0");
  EXPECT_FALSE(Version::Parse("none"));
  EXPECT_LT(Version::Parse("1.6.24")->Compare(*Version::Parse("1.7")), 0);
  EXPECT_EQ(MaxCdiVersionForPodman(*Version::Parse("4.3.1")), "0.5.0");
  EXPECT_FALSE(MaxCdiVersionForPodman(*Version::Parse("4.0.2")));
}

TEST(NvproxyDrivers, BuiltinListNamesItsSourceAndTheFixtureDriver) {
  const auto& drivers = BuiltinNvproxyDrivers();
  EXPECT_NE(drivers.source.find("gvisor"), std::string::npos);
  EXPECT_GE(drivers.versions.size(), 10u);
  EXPECT_TRUE(drivers.Supports("580.65.06"));
  EXPECT_FALSE(drivers.Supports("580.65.07"));
}

}  // namespace
}  // namespace tessera::runtimes

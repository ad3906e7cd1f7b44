// runsc's abilities from its own output, the gVisor host check, and doctor --probe's reading of
// podman failures: pure logic, fed with what these programs print.
#include <gtest/gtest.h>

#include "runtimes/runtimes.h"

namespace tessera::runtimes {
namespace {

// Excerpts of Debian 12's runsc 0.0~20221219.0 (`runsc --version`, `runsc flags` on stderr).
constexpr const char* kDebianVersion = "runsc version 0.0~20221219.0\nspec: 1.0.2-dev\n";
constexpr const char* kDebianFlags =
    "  -net-raw runsc exec\n"
    "    \tenable raw sockets. When false, raw sockets are disabled by removing CAP_NET_RAW from "
    "containers (runsc exec will still be able to utilize raw sockets).\n"
    "  -network value\n"
    "    \tspecifies which network to use: sandbox (default), host, none. Using network inside "
    "the sandbox is more secure because it's isolated from the host network.\n"
    "  -num-network-channels int\n"
    "    \tnumber of underlying channels(FDs) to use for network link endpoints. (default 1)\n";
// The shape later releases print for their GPU flags.
constexpr const char* kNvproxyFlags =
    "  -nvproxy\n"
    "    \tEXPERIMENTAL: enable support for Nvidia GPUs\n"
    "  -nvproxy-docker\n"
    "    \tDEPRECATED: use nvidia-container-runtime or `docker run --gpus` directly.\n";

TEST(RunscInfo, DebiansRunscHasNoNvproxy) {
  auto info = ParseRunscInfo("/usr/bin/runsc", kDebianVersion, kDebianFlags);
  EXPECT_EQ(info.path, "/usr/bin/runsc");
  EXPECT_EQ(info.version, "0.0~20221219.0");
  EXPECT_FALSE(info.nvproxy);
}

TEST(RunscInfo, ANvproxyFlagOfItsOwnMeansGpuSupport) {
  auto info = ParseRunscInfo("runsc", "runsc version release-20240513.0\n",
                             std::string(kDebianFlags) + kNvproxyFlags);
  EXPECT_EQ(info.version, "release-20240513.0");
  EXPECT_TRUE(info.nvproxy);
  // Only a flag named exactly -nvproxy counts, not one that merely starts with it.
  auto docker_only = ParseRunscInfo("runsc", "runsc version x\n",
                                    "  -nvproxy-docker\n    \tDEPRECATED\n  -nvproxyish int\n");
  EXPECT_FALSE(docker_only.nvproxy);
}

TEST(RunscInfo, GpuRefusalNamesTheVersionAndWhatIsNeeded) {
  auto refused = GvisorGpuSupport(ParseRunscInfo("/usr/bin/runsc", kDebianVersion, kDebianFlags));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().category, ErrorCategory::kFailedPrecondition);
  const std::string& message = refused.error().message;
  EXPECT_NE(message.find("runsc 0.0~20221219.0"), std::string::npos) << message;
  EXPECT_NE(message.find("/usr/bin/runsc"), std::string::npos) << message;
  EXPECT_NE(message.find("gVisor release with nvproxy"), std::string::npos) << message;
  EXPECT_TRUE(GvisorGpuSupport(ParseRunscInfo("runsc", "runsc version y\n", kNvproxyFlags)).ok());
}

const Check* Find(const std::vector<Check>& checks, const std::string& id) {
  for (const auto& check : checks)
    if (check.id == id) return &check;
  return nullptr;
}

TEST(RunscInfo, SharesOfAGpuNeedAnNvproxyThatCarriesMps) {
  EXPECT_EQ(RunscReleaseDate("0.0~20221219.0"), 20221219);
  EXPECT_EQ(RunscReleaseDate("release-20260715.0"), 20260715);
  EXPECT_FALSE(RunscReleaseDate("y"));
  EXPECT_FALSE(RunscReleaseDate("release-2026"));
  // Debian's: neither nvproxy nor a late enough release.
  auto refused = GvisorMpsSupport(ParseRunscInfo("/usr/bin/runsc", kDebianVersion, kDebianFlags));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().category, ErrorCategory::kInvalidArgument);
  EXPECT_NE(refused.error().message.find("0.0~20221219.0"), std::string::npos);
  EXPECT_NE(refused.error().message.find("without nvproxy"), std::string::npos);
  // nvproxy from before MPS clients (google/gvisor PR #13484, June 2026): still refused.
  EXPECT_FALSE(GvisorMpsSupport(
      ParseRunscInfo("runsc", "runsc version release-20250512.0\n", kNvproxyFlags)));
  EXPECT_TRUE(GvisorMpsSupport(
      ParseRunscInfo("runsc", "runsc version release-20260601.0\n", kNvproxyFlags)));
}

TEST(RunscCheck, WarnsWithoutNvproxyAndFailsOnAGpuHostConfiguredForGvisor) {
  HostFacts facts;
  auto none = CheckHost(facts, BuiltinNvproxyDrivers(), nullptr);
  ASSERT_NE(Find(none, "gvisor.runsc"), nullptr);
  EXPECT_EQ(Find(none, "gvisor.runsc")->verdict, Verdict::kPass);  // not installed

  facts.runsc = ParseRunscInfo("/usr/bin/runsc", kDebianVersion, kDebianFlags);
  auto old = CheckHost(facts, BuiltinNvproxyDrivers(), nullptr);
  const Check* check = Find(old, "gvisor.runsc");
  ASSERT_NE(check, nullptr);
  EXPECT_EQ(check->verdict, Verdict::kWarn);
  EXPECT_NE(check->evidence.find("runsc 0.0~20221219.0"), std::string::npos) << check->evidence;
  EXPECT_NE(check->evidence.find("409"), std::string::npos) << check->evidence;
  EXPECT_NE(check->fix.find("gVisor release with nvproxy"), std::string::npos) << check->fix;

  ContainerdConfigFacts containerd;
  containerd.runtimes.push_back({"runsc", "io.containerd.runsc.v1", "", "", "", {}});
  facts.inventory.nvidia_driver = inventory::NvidiaDriver{};
  auto gpu_host = CheckHost(facts, BuiltinNvproxyDrivers(), &containerd);
  EXPECT_EQ(Find(gpu_host, "gvisor.runsc")->verdict, Verdict::kFail);

  facts.runsc = ParseRunscInfo("/opt/runsc", "runsc version release-20240513.0\n", kNvproxyFlags);
  auto current = CheckHost(facts, BuiltinNvproxyDrivers(), &containerd);
  EXPECT_EQ(Find(current, "gvisor.runsc")->verdict, Verdict::kPass);
}

TEST(Probe, RuntimesInOrderWithRunscOnNetworkNone) {
  auto runtimes = ProbeRuntimes([](const std::string& program) {
    return program == "kata-runtime" ? std::string() : "/usr/bin/" + program;
  });
  ASSERT_EQ(runtimes.size(), 3u);
  EXPECT_EQ(runtimes[0].name, "runc");
  EXPECT_TRUE(runtimes[0].runtime_flags.empty());
  EXPECT_EQ(runtimes[1].name, "runsc");
  EXPECT_EQ(runtimes[1].runtime_flags, std::vector<std::string>{"network=none"});
  EXPECT_EQ(runtimes[2].name, "kata-qemu");
  EXPECT_TRUE(ProbeRuntimes([](const std::string&) { return std::string(); }).empty());
}

TEST(Probe, RuntimeFlagsGoBeforeRunAndTheRootDirectoryReplacesTheImage) {
  ProbeTarget rootfs{"", "/tmp/probe", {"/true"}};
  EXPECT_EQ(ProbeArgv("podman", {"runsc", "/usr/bin/runsc", {"network=none"}}, rootfs),
            (std::vector<std::string>{"podman", "--runtime-flag", "network=none", "run", "--rm",
                                      "--network", "none", "--runtime", "/usr/bin/runsc",
                                      "--rootfs", "/tmp/probe", "/true"}));
  ProbeTarget image{"localhost/busybox:1", "", {"true"}};
  EXPECT_EQ(ProbeArgv("podman", {"runc", "/usr/sbin/runc", {}}, image),
            (std::vector<std::string>{"podman", "run", "--rm", "--network", "none", "--runtime",
                                      "/usr/sbin/runc", "localhost/busybox:1", "true"}));
}

TEST(Probe, RlimitFailureNamesTheLimitAndTheUlimitsSetting) {
  // podman 4.3 + runc as root without CAP_SYS_RESOURCE, verbatim.
  ProbeOutcome outcome{126, false,
                       "Error: runc: runc create failed: unable to start container process: error "
                       "during container init: error setting rlimits for ready process: error "
                       "setting rlimit type 7: operation not permitted: OCI permission denied\n"};
  ProbeContext context{"podman run --rm ...", ""};
  Check check = CheckProbe({"runc", "/usr/bin/runc", {}}, outcome, context);
  EXPECT_EQ(check.id, "probe.runc");
  EXPECT_EQ(check.verdict, Verdict::kFail);
  EXPECT_NE(check.evidence.find("error setting rlimit type 7: operation not permitted"),
            std::string::npos)
      << check.evidence;
  EXPECT_NE(check.fix.find("nofile"), std::string::npos) << check.fix;
  EXPECT_NE(check.fix.find("rlimit type 7 is nofile"), std::string::npos) << check.fix;
  EXPECT_NE(check.fix.find("default_ulimits = [\"nofile=1024:1024\", \"nproc=1024:1024\"]"),
            std::string::npos)
      << check.fix;
  EXPECT_NE(check.fix.find("/etc/containers/containers.conf"), std::string::npos) << check.fix;
  context.containers_conf = "/srv/podman.conf";
  EXPECT_NE(CheckProbe({"runc", "/usr/bin/runc", {}}, outcome, context)
                .fix.find("$CONTAINERS_CONF (/srv/podman.conf)"),
            std::string::npos);
}

TEST(Probe, OtherFailuresGetTheirOwnFixAndSuccessPasses) {
  ProbeContext context{"podman ...", ""};
  ProbeRuntime runsc{"runsc", "/usr/bin/runsc", {}};
  Check network = CheckProbe(
      runsc,
      {126, false,
       "starting container: setting up network: creating interfaces from net namespace "
       "\"/proc/7660/ns/net\": cannot run with network enabled in root network namespace\n"
       "Error: `/usr/bin/runsc start ce04` failed: exit status 128\n"},
      context);
  EXPECT_EQ(network.verdict, Verdict::kFail);
  EXPECT_NE(network.evidence.find("/usr/bin/runsc start"), std::string::npos) << network.evidence;
  EXPECT_NE(network.fix.find("network=host"), std::string::npos) << network.fix;
  Check missing = CheckProbe(
      {"kata-runtime", "/usr/bin/kata-runtime", {}},
      {125, false, "Error: default OCI runtime \"kata\" not found: invalid argument\n"}, context);
  EXPECT_NE(missing.fix.find("install kata-runtime"), std::string::npos) << missing.fix;
  Check hung = CheckProbe(runsc, {137, true, ""}, context);
  EXPECT_EQ(hung.verdict, Verdict::kFail);
  EXPECT_NE(hung.evidence.find("timed out"), std::string::npos);
  Check ran = CheckProbe(runsc, {0, false, ""}, context);
  EXPECT_EQ(ran.verdict, Verdict::kPass);
  EXPECT_TRUE(ran.fix.empty());
}

}  // namespace
}  // namespace tessera::runtimes

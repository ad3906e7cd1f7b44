// What a failed podman start means (doctor's diagnoses, shared by `doctor --probe` and the local
// backend) and the --ulimit values chosen where podman's defaults cannot be set. Pure.
#include <gtest/gtest.h>

#include "runtimes/runtimes.h"

namespace tessera::runtimes {
namespace {

// As the kernel writes /proc/<pid>/limits (conmon's, on a host where podman lowered nproc).
constexpr const char* kConmonLimits =
    "Limit                     Soft Limit           Hard Limit           Units     \n"
    "Max cpu time              unlimited            unlimited            seconds   \n"
    "Max processes             32768                32768                processes \n"
    "Max open files            20000                20000                files     \n"
    "Max locked memory         8388608              8388608              bytes     \n";

TEST(ProcLimits, ReadsTheHardLimitsOfFilesAndProcesses) {
  auto limits = ParseProcLimits(kConmonLimits);
  ASSERT_TRUE(limits.ok()) << limits.error().message;
  EXPECT_EQ(limits->open_files, 20000u);
  EXPECT_EQ(limits->processes, 32768u);
  auto unlimited = ParseProcLimits(
      "Max processes             unlimited            unlimited            processes \n"
      "Max open files            1024                 4096                 files     \n");
  ASSERT_TRUE(unlimited.ok());
  EXPECT_FALSE(unlimited->processes.has_value());
  EXPECT_EQ(unlimited->open_files, 4096u);
  EXPECT_FALSE(ParseProcLimits("Max open files  1024  many  files\nMax processes 1 1 p\n").ok());
  EXPECT_FALSE(ParseProcLimits("Max open files  1024  1024  files\n").ok());  // no processes line
}

TEST(UlimitChoice, TakesTheLowestHardLimitAndNeverMoreThanPodmansDefault) {
  ProcessLimits shell{20000, 96365};
  ProcessLimits conmon{20000, 32768};
  EXPECT_EQ(UlimitArgsWithin({shell, conmon}),
            (std::vector<std::string>{"--ulimit", "nofile=20000:20000", "--ulimit",
                                      "nproc=32768:32768"}));
  ProcessLimits generous{std::nullopt, 4000000};
  EXPECT_EQ(UlimitArgsWithin({generous}),
            (std::vector<std::string>{"--ulimit", "nproc=1048576:1048576"}));
  EXPECT_TRUE(UlimitArgsWithin({ProcessLimits{}}).empty());
}

TEST(PodmanFailure, NamesTheRlimitItCouldNotSetAndTheFix) {
  ProbeOutcome outcome{126, false,
                       "Error: runc: runc create failed: unable to start container process: error "
                       "during container init: error setting rlimits for ready process: error "
                       "setting rlimit type 6: operation not permitted: OCI permission denied\n"};
  auto failure = DiagnosePodmanFailure("runc", outcome, {"podman run ...", "/srv/podman.conf"});
  EXPECT_EQ(failure.rlimit_type, 6);
  EXPECT_EQ(failure.error.rfind("Error: runc: runc create failed", 0), 0u) << failure.error;
  EXPECT_NE(failure.fix.find("rlimit type 6 is nproc"), std::string::npos) << failure.fix;
  EXPECT_NE(failure.fix.find("`tessera serve` gives its containers --ulimit values"),
            std::string::npos)
      << failure.fix;
}

TEST(PodmanFailure, SeccompProfileAndSystemdCgroupsGetTheirOwnFix) {
  auto seccomp = DiagnosePodmanFailure(
      "runc",
      {125, false,
       "Error: opening seccomp profile failed: open /x.json: no such file or directory\n"},
      {"", "/srv/podman.conf"});
  EXPECT_FALSE(seccomp.rlimit_type.has_value());
  EXPECT_NE(seccomp.fix.find("seccomp_profile in $CONTAINERS_CONF (/srv/podman.conf)"),
            std::string::npos)
      << seccomp.fix;
  auto systemd = DiagnosePodmanFailure(
      "runc",
      {126, false,
       "time=\"...\" level=warning msg=\"Failed to add conmon to systemd sandbox cgroup\"\n"
       "Error: OCI runtime error: runc: runc create failed: systemd not running on this host, "
       "cannot use systemd cgroups manager\n"},
      {});
  EXPECT_EQ(systemd.error.rfind("Error: OCI runtime error", 0), 0u) << systemd.error;
  EXPECT_NE(systemd.fix.find("cgroup_manager = \"cgroupfs\""), std::string::npos) << systemd.fix;
  auto silent = DiagnosePodmanFailure("runc", {125, false, ""}, {});
  EXPECT_EQ(silent.error, "exit status 125");
}

}  // namespace
}  // namespace tessera::runtimes

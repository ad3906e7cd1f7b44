// `tessera doctor --probe` as a process against this host's real podman, runc and runsc.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "support/fixture_host.h"
#include "support/podman_harness.h"

namespace {

using tessera::testing::Podman;
using tessera::testing::RunCommand;
using tessera::testing::TempDir;
using tessera::testing::TesseraBinary;

// doctor --probe --format json with CONTAINERS_CONF=conf; the checks by id.
std::map<std::string, nlohmann::json> Probe(const std::string& conf, int* status,
                                            std::string* out) {
  *out = RunCommand(
      "CONTAINERS_CONF=" + conf + " " + TesseraBinary() + " doctor --probe --format json", status);
  std::map<std::string, nlohmann::json> checks;
  auto doc = nlohmann::json::parse(*out, nullptr, false);
  if (doc.is_discarded()) return checks;
  for (const auto& check : doc["checks"])
    checks[check["id"].get<std::string>()] = check;
  return checks;
}

std::string InstalledRunscVersion() {
  std::string text = RunCommand("runsc --version 2>/dev/null");
  const std::string prefix = "runsc version ";
  auto at = text.find(prefix);
  if (at == std::string::npos) return "";
  return text.substr(at + prefix.size(), text.find('\n', at) - at - prefix.size());
}

TEST(DoctorProbe, RuncAndRunscStartAContainerWithUlimitsThisHostAllows) {
  const Podman& podman = Podman::Get();  // writes the containers.conf every real test uses
  ASSERT_TRUE(podman.ready()) << podman.setup_error();
  const std::string version = InstalledRunscVersion();
  ASSERT_FALSE(version.empty()) << "runsc is not installed (scripts/setup.sh installs it)";
  int status = -1;
  std::string out;
  auto checks = Probe(podman.containers_conf(), &status, &out);
  ASSERT_TRUE(checks.count("probe.runc")) << out;
  EXPECT_EQ(checks["probe.runc"]["verdict"], "PASS") << checks["probe.runc"];
  ASSERT_TRUE(checks.count("probe.runsc")) << out;
  EXPECT_EQ(checks["probe.runsc"]["verdict"], "PASS") << checks["probe.runsc"];
  EXPECT_NE(checks["probe.runsc"]["evidence"].get<std::string>().find("network=none"),
            std::string::npos);
  // The same run says what the installed runsc can do for GPU containers, naming its version.
  ASSERT_TRUE(checks.count("gvisor.runsc")) << out;
  const std::string evidence = checks["gvisor.runsc"]["evidence"];
  EXPECT_NE(evidence.find("runsc " + version), std::string::npos) << evidence;
  bool nvproxy = RunCommand("runsc flags 2>&1 | grep -cE '^ +-nvproxy$'") != "0\n";
  if (nvproxy) {
    EXPECT_EQ(checks["gvisor.runsc"]["verdict"], "PASS") << evidence;
  } else {
    EXPECT_EQ(checks["gvisor.runsc"]["verdict"], "WARN") << evidence;
    EXPECT_NE(checks["gvisor.runsc"]["fix"].get<std::string>().find("gVisor release with nvproxy"),
              std::string::npos);
  }
}

TEST(DoctorProbe, AnUlimitTheKernelRefusesIsReportedWithItsFix) {
  ASSERT_TRUE(Podman::Get().ready()) << Podman::Get().setup_error();
  // Above fs.nr_open no process may hold that many files, CAP_SYS_RESOURCE or not: runc fails
  // exactly as it does on hosts where podman's root defaults exceed what it may set.
  std::string nr_open = RunCommand("cat /proc/sys/fs/nr_open");
  ASSERT_FALSE(nr_open.empty());
  long too_many = std::stol(nr_open) + 1;
  TempDir dir;
  const std::string conf = dir.path() + "/containers.conf";
  std::ofstream(conf) << "[containers]\ndefault_ulimits = [\"nofile=" << too_many << ":" << too_many
                      << "\", \"nproc=1024:1024\"]\n[engine]\nruntime = \"runc\"\n";
  int status = -1;
  std::string out;
  auto checks = Probe(conf, &status, &out);
  EXPECT_EQ(status, 1) << out;
  ASSERT_TRUE(checks.count("probe.runc")) << out;
  const auto& runc = checks["probe.runc"];
  EXPECT_EQ(runc["verdict"], "FAIL") << runc;
  EXPECT_NE(runc["evidence"].get<std::string>().find("error setting rlimit type 7"),
            std::string::npos)
      << runc;
  const std::string fix = runc["fix"];
  EXPECT_NE(fix.find("rlimit type 7 is nofile"), std::string::npos) << fix;
  EXPECT_NE(fix.find("default_ulimits"), std::string::npos) << fix;
  EXPECT_NE(fix.find("$CONTAINERS_CONF (" + conf + ")"), std::string::npos) << fix;
}

}  // namespace

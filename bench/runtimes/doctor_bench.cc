// Whole-process `tessera doctor` on the 8-GPU HGX fixture (start-up, inventory, TOML parse,
// every check, table output), with a gVisor containerd config and a fresh CDI spec, against
// `tessera --version` and /bin/true as baselines. Prints min/p50/p90/p99/max over N runs.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "support/fixture_host.h"
#include "support/process_timer.h"

int main(int argc, char** argv) {
  int runs = argc > 1 ? std::atoi(argv[1]) : 200;
  tessera::testing::TempHost host("hgx-h100-dgx");
  const std::string tessera = std::string(TESSERA_BINARY_DIR) + "/src/cli/tessera";
  const std::string& root = host.root();
  std::string setup = "mkdir -p " + root + "/etc/containerd " + root + "/proc/sys/kernel && " +
                      "echo 6.8.0 > " + root + "/proc/sys/kernel/osrelease && " + tessera +
                      " runtime-config containerd --runtime gvisor > " + root +
                      "/etc/containerd/config.toml && " + tessera +
                      " runtime-config runsc-toml > " + root + "/etc/containerd/runsc.toml && " +
                      tessera + " cdi generate --root " + root + " --mode driver --output-dir " +
                      root + "/var/run/cdi >/dev/null";
  int status = 0;
  tessera::testing::RunCommand(setup, &status);
  if (status != 0) {
    std::fprintf(stderr, "setup failed\n");
    return 1;
  }
  auto doctor =
      tessera::bench::TimeProcess({tessera, "doctor", "--root", root, "--containerd-version",
                                   "1.7.20", "--podman-version", "4.3.1"},
                                  runs);
  auto doctor_json =
      tessera::bench::TimeProcess({tessera, "doctor", "--root", root, "--containerd-version",
                                   "1.7.20", "--podman-version", "4.3.1", "--format", "json"},
                                  runs);
  auto version = tessera::bench::TimeProcess({tessera, "--version"}, runs);
  auto baseline = tessera::bench::TimeProcess({"/bin/true"}, runs);
  std::printf(
      "%s\n",
      tessera::bench::FormatTimings("tessera doctor (hgx-h100-dgx, table)", doctor).c_str());
  std::printf(
      "%s\n",
      tessera::bench::FormatTimings("tessera doctor (hgx-h100-dgx, json)", doctor_json).c_str());
  std::printf("%s\n", tessera::bench::FormatTimings("tessera --version", version).c_str());
  std::printf("%s\n", tessera::bench::FormatTimings("/bin/true", baseline).c_str());
  return doctor.failures || doctor_json.failures ? 1 : 0;
}

// `tessera windows mounts --run`: prints the runtime's command, then becomes it. A stub runtime
// on PATH records the argv it was started with and exits with a code of its own, which proves
// tessera exec'd it rather than returning.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "windows/process.h"

namespace tessera::testing {
namespace {

const std::string kFixtures = std::string(TESSERA_FIXTURES_DIR) + "/windows";

class StubRuntime {
 public:
  explicit StubRuntime(const std::string& name) {
    char dir_template[] = "/tmp/tessera-stub-XXXXXX";
    dir_ = mkdtemp(dir_template);
    std::string script = dir_ + "/" + name;
    std::ofstream(script) << "#!/bin/sh\nprintf '%s\\n' \"$(basename \"$0\")\" \"$@\" > '" << dir_
                          << "/argv'\nexit 7\n";
    chmod(script.c_str(), 0755);
  }
  ~StubRuntime() {
    unlink((dir_ + "/argv").c_str());
    std::vector<std::string> names = {"ctr", "nerdctl", "docker"};
    for (const std::string& n : names)
      unlink((dir_ + "/" + n).c_str());
    rmdir(dir_.c_str());
  }
  const std::string& dir() const { return dir_; }
  std::vector<std::string> RecordedArgv() const {
    std::ifstream in(dir_ + "/argv");
    std::vector<std::string> out;
    for (std::string line; std::getline(in, line);)
      out.push_back(line);
    return out;
  }

 private:
  std::string dir_;
};

std::vector<std::string> Tessera(std::vector<std::string> args) {
  args.insert(args.begin(), {TesseraBinary(), "windows"});
  return args;
}

TEST(WindowsRun, CtrGetsDevicesMountsImageIdAndCommandVerbatim) {
  StubRuntime stub("ctr");
  ProcessResult r = RunProcess(
      Tessera({"mounts", "--snapshot", kFixtures + "/ws2025-l4.json", "--all", "--format", "ctr",
               "--no-vendor-files", "--run", "mcr.microsoft.com/windows/server:ltsc2025", "cmd",
               "/c", "nvidia-smi", "-L"}),
      stub.dir());
  EXPECT_EQ(r.exit_code, 7) << r.err;
  std::vector<std::string> argv = stub.RecordedArgv();
  ASSERT_GE(argv.size(), 10u);
  EXPECT_EQ(argv[0], "ctr");
  EXPECT_EQ(argv[1], "run");
  EXPECT_EQ(argv[2], "--rm");
  EXPECT_EQ(argv[3], "--device");
  EXPECT_EQ(argv[4], "vpci-location-path://PCIROOT(0)#PCI(0100)#PCI(0000)");
  EXPECT_EQ(argv[5], "--mount");
  EXPECT_EQ(argv[6],
            "type=bind,src=C:\\Windows\\System32\\DriverStore\\FileRepository\\nvgridsw_azure.inf_"
            "amd64_7f3b2a9c0d1e4f56\\nvapi64.dll,dst=C:\\Windows\\System32\\nvapi64.dll,options="
            "rbind:ro");
  std::vector<std::string> tail(argv.end() - 6, argv.end());
  EXPECT_EQ(tail, (std::vector<std::string>{"mcr.microsoft.com/windows/server:ltsc2025",
                                            "tessera-gpu", "cmd", "/c", "nvidia-smi", "-L"}));
  // Every mount is read-only.
  for (size_t i = 5; i + 1 < argv.size(); i += 2) {
    if (argv[i] != "--mount") break;
    EXPECT_NE(argv[i + 1].find(",options=rbind:ro"), std::string::npos) << argv[i + 1];
  }
  // The command line was printed before the exec.
  std::string printed;
  for (const std::string& a : argv)
    printed += (printed.empty() ? "" : " ") + a;
  EXPECT_EQ(r.out, printed + "\n");
}

TEST(WindowsRun, DockerGetsTheClassDeviceAndTheWarningGoesToStderr) {
  StubRuntime stub("docker");
  ProcessResult r =
      RunProcess(Tessera({"mounts", "--snapshot", kFixtures + "/ws2022-aws-4xt4.json", "--all",
                          "--format", "docker", "--run", "mcr.microsoft.com/windows:ltsc2022"}),
                 stub.dir());
  EXPECT_EQ(r.exit_code, 7);
  EXPECT_EQ(stub.RecordedArgv(),
            (std::vector<std::string>{"docker", "run", "--rm", "--isolation", "process", "--device",
                                      "class/5B45201D-F2F2-4F3B-85BB-30FF1F953599",
                                      "mcr.microsoft.com/windows:ltsc2022"}));
  EXPECT_NE(r.err.find("every GPU on the host becomes visible"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("shows every GPU to a container"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("warning"), std::string::npos) << r.out;
}

TEST(WindowsRun, NerdctlGetsDockerStyleReadOnlyMounts) {
  StubRuntime stub("nerdctl");
  ProcessResult r = RunProcess(
      Tessera({"mounts", "--snapshot", kFixtures + "/laptop-igpu-dgpu.json", "--index", "1",
               "--format", "nerdctl", "--run", "mcr.microsoft.com/windows:ltsc2022", "nvidia-smi"}),
      stub.dir());
  EXPECT_EQ(r.exit_code, 7);
  std::vector<std::string> argv = stub.RecordedArgv();
  ASSERT_GE(argv.size(), 7u);
  EXPECT_EQ(argv[0], "nerdctl");
  EXPECT_EQ(argv[4], "vpci-location-path://PCIROOT(0)#PCI(0100)#PCI(0000)");
  EXPECT_EQ(argv[argv.size() - 2], "mcr.microsoft.com/windows:ltsc2022");
  EXPECT_EQ(argv.back(), "nvidia-smi");
  int mounts = 0;
  for (size_t i = 0; i + 1 < argv.size(); ++i) {
    if (argv[i] != "--mount") continue;
    ++mounts;
    EXPECT_EQ(argv[i + 1].substr(argv[i + 1].size() - 9), ",readonly") << argv[i + 1];
    EXPECT_EQ(argv[i + 1].find("iigd_dch"), std::string::npos) << "iGPU files leaked";
  }
  EXPECT_EQ(mounts, 12);  // 11 CopyToVm* values + nvidia-smi.exe
}

TEST(WindowsRun, MissingRuntimeIsReportedAsUnavailable) {
  char dir_template[] = "/tmp/tessera-empty-XXXXXX";
  std::string empty = mkdtemp(dir_template);
  ProcessResult r = RunProcess(Tessera({"mounts", "--snapshot", kFixtures + "/ws2025-l4.json",
                                        "--all", "--format", "ctr", "--run", "img"}),
                               empty, /*keep_path=*/false);
  rmdir(empty.c_str());
  EXPECT_EQ(r.exit_code, 4);
  EXPECT_NE(r.err.find("tessera: run ctr: No such file or directory"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tessera::testing

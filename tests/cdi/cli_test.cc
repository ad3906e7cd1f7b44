// `tessera cdi generate|validate` as a user runs them, including --watch reacting to a driver
// upgrade and a GPU hot-unplug on a private copy of a fixture host.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "cdi/cdi.h"
#include "support/file_text.h"
#include "support/fixture_host.h"
#include "support/podman_harness.h"
#include "support/wait.h"

namespace tessera::cdi {
namespace {

namespace fs = std::filesystem;
using tessera::testing::MaterializeHost;
using tessera::testing::RunArgv;
using tessera::testing::TempDir;
using tessera::testing::TempHost;
using tessera::testing::TesseraBinary;

TEST(CdiGenerateCommand, WritesOneFilePerKindNamedVendorClassWithMode0644) {
  std::string root = MaterializeHost("hgx-h100-vfio");
  TempDir out;
  auto result =
      RunArgv({TesseraBinary(), "cdi", "generate", "--root", root, "--output-dir", out.path()});
  ASSERT_EQ(result.status, 0) << result.output;
  for (const char* name : {"nvidia.com-pgpu.json", "nvidia.com-nvswitch.json"}) {
    std::string path = out.path() + "/" + name;
    struct stat st;
    ASSERT_EQ(::stat(path.c_str(), &st), 0) << path;
    EXPECT_EQ(st.st_mode & 07777, 0644u);
    EXPECT_TRUE(CheckSpecText(testing::ReadText(path)).empty());
  }
}

TEST(CdiGenerateCommand, OutputFileNeedsExactlyOneSpec) {
  std::string root = MaterializeHost("hgx-h100-vfio");
  TempDir out;
  auto result = RunArgv(
      {TesseraBinary(), "cdi", "generate", "--root", root, "--output", out.path() + "/x.json"});
  EXPECT_EQ(result.status, 2) << result.output;
  EXPECT_NE(result.output.find("nvidia.com/nvswitch, nvidia.com/pgpu"), std::string::npos)
      << result.output;
  EXPECT_FALSE(fs::exists(out.path() + "/x.json"));
}

TEST(CdiGenerateCommand, YamlToStdoutParsesBackToTheJsonSpec) {
  std::string root = MaterializeHost("workstation-intel-nvidia");
  auto yaml = RunArgv({TesseraBinary(), "cdi", "generate", "--root", root, "--mode", "driver",
                       "--output", "-", "--format", "yaml"});
  auto json = RunArgv(
      {TesseraBinary(), "cdi", "generate", "--root", root, "--mode", "driver", "--output", "-"});
  ASSERT_EQ(yaml.status, 0) << yaml.output;
  ASSERT_EQ(json.status, 0) << json.output;
  ASSERT_EQ(yaml.output.rfind("---\n", 0), 0u);
  auto from_yaml = ParseSpec(yaml.output.substr(4));
  auto from_json = ParseSpec(json.output);
  ASSERT_TRUE(from_yaml.problems.empty()) << FormatProblem(from_yaml.problems[0]);
  ASSERT_TRUE(from_json.problems.empty());
  EXPECT_EQ(from_yaml.spec, from_json.spec);
  EXPECT_EQ(from_json.spec.kind, "nvidia.com/gpu");
}

TEST(CdiGenerateCommand, AHostWithoutGpusWritesNothingAndSucceeds) {
  std::string root = MaterializeHost("no-gpu");
  TempDir out;
  auto result =
      RunArgv({TesseraBinary(), "cdi", "generate", "--root", root, "--output-dir", out.path()});
  EXPECT_EQ(result.status, 0) << result.output;
  EXPECT_TRUE(fs::is_empty(out.path()));
}

TEST(CdiValidateCommand, ExitsZeroForGoodSpecsAndOneWithProblemLines) {
  TempDir dir;
  std::string good = dir.path() + "/good.json";
  std::string bad = dir.path() + "/bad.yaml";
  std::ofstream(good) << R"({"cdiVersion":"0.3.0","kind":"vendor.com/gpu","devices":[)"
                         R"({"name":"gpu0","containerEdits":{"env":["A=1"]}}]})";
  std::ofstream(bad) << "cdiVersion: 0.3.0\nkind: vendor.com/gpu\ndevices:\n"
                        "- name: gpu0\n  containerEdits:\n    env: [A]\n"
                        "- name: gpu0\n  containerEdits:\n    env: [B=1]\n";
  auto ok = RunArgv({TesseraBinary(), "cdi", "validate", good});
  EXPECT_EQ(ok.status, 0) << ok.output;
  auto failed = RunArgv({TesseraBinary(), "cdi", "validate", good, bad});
  EXPECT_EQ(failed.status, 1);
  EXPECT_EQ(failed.output, bad +
                               ": gpu0: containerEdits.env[0]: invalid environment variable "
                               "\"A\" (want NAME=value)\n" +
                               bad + ": gpu0: name: duplicate device name (also devices[0])\n");
}

// A `tessera cdi generate --watch` child process, stopped with SIGTERM at the end.
class WatchProcess {
 public:
  explicit WatchProcess(const std::vector<std::string>& args) {
    pid_ = ::fork();
    if (pid_ == 0) {
      std::vector<char*> argv;
      for (const auto& arg : args)
        argv.push_back(const_cast<char*>(arg.c_str()));
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
  }
  // SIGTERM; returns the exit status.
  int Stop() {
    if (pid_ <= 0) return -1;
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  ~WatchProcess() { Stop(); }

 private:
  pid_t pid_ = -1;
};

// Waits (up to tessera::testing::kEventTimeout) until `predicate` holds for the file's content.
template <typename Predicate>
bool WaitForContent(const std::string& path, Predicate predicate) {
  return tessera::testing::WaitUntil(
      [&] { return fs::exists(path) && predicate(testing::ReadText(path)); },
      tessera::testing::kEventTimeout, std::chrono::milliseconds(50));
}

ino_t Inode(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

TEST(CdiGenerateWatch, RewritesTheSpecAfterADriverUpgradeAndAHotUnplugOnlyWhenItChanged) {
  TempHost host("hgx-h100-dgx");
  TempDir out;
  std::string spec = out.path() + "/nvidia.com-gpu.json";
  WatchProcess watch({TesseraBinary(), "cdi", "generate", "--root", host.root(), "--output-dir",
                      out.path(), "--watch", "--poll-interval-ms", "200"});
  ASSERT_TRUE(WaitForContent(spec, [](const std::string& text) {
    return text.find("libcuda.so.580.65.06") != std::string::npos;
  }));
  ino_t first = Inode(spec);

  // Nothing relevant changes: rewriting the version file with the same text, and a busy /etc.
  std::string version_file = host.root() + "/proc/driver/nvidia/version";
  std::string version_text = testing::ReadText(version_file);
  std::ofstream(version_file) << version_text;
  std::ofstream(host.root() + "/etc/hostname") << "node-1\n";
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  EXPECT_EQ(Inode(spec), first) << "spec rewritten although nothing changed";

  // Driver upgrade 580.65.06 -> 580.82.07: new kernel module version, new libraries and
  // firmware, ld.so.cache rebuilt by ldconfig. (The renamed fixture libraries keep their old
  // SONAMEs, so ldconfig recreates links such as libnvidia-glcore.so.580.65.06; only the files
  // named by version are checked.)
  std::string script =
      "set -e; cd '" + host.root() +
      "'; sed -i 's/580\\.65\\.06/580.82.07/g' proc/driver/nvidia/version "
      "sys/module/nvidia/version; "
      "for f in usr/lib/x86_64-linux-gnu/*.so.580.65.06; do mv \"$f\" \"${f%580.65.06}580.82.07\"; "
      "done; mv lib/firmware/nvidia/580.65.06 lib/firmware/nvidia/580.82.07; ldconfig -r .";
  auto upgraded = RunArgv({"sh", "-c", script});
  ASSERT_EQ(upgraded.status, 0) << upgraded.output;
  EXPECT_TRUE(WaitForContent(spec, [](const std::string& text) {
    return text.find("libcuda.so.580.82.07") != std::string::npos &&
           text.find("libcuda.so.580.65.06") == std::string::npos &&
           text.find("/lib/firmware/nvidia/580.65.06/") == std::string::npos &&
           text.find("/lib/firmware/nvidia/580.82.07/") != std::string::npos;
  })) << testing::ReadText(spec);
  EXPECT_TRUE(CheckSpecText(testing::ReadText(spec)).empty());

  // Hot-unplug of the last GPU: its PCI entry disappears from sysfs.
  auto remaining = ParseSpec(testing::ReadText(spec)).spec.devices.size();
  std::string last_gpu;
  for (const auto& entry : fs::directory_iterator(host.root() + "/sys/bus/pci/devices")) {
    std::string name = entry.path().filename().string();
    if (testing::ReadText(entry.path().string() + "/class").rfind("0x0302", 0) == 0 &&
        name > last_gpu) {
      last_gpu = name;
    }
  }
  ASSERT_FALSE(last_gpu.empty());
  fs::remove(host.root() + "/sys/bus/pci/devices/" + last_gpu);
  EXPECT_TRUE(WaitForContent(spec, [&](const std::string& text) {
    return ParseSpec(text).spec.devices.size() == remaining - 2;  // index + UUID names
  })) << testing::ReadText(spec);

  EXPECT_EQ(watch.Stop(), 0);
}

}  // namespace
}  // namespace tessera::cdi

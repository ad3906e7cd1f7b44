#include "support/podman_harness.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;

constexpr const char* kBusybox = "/bin/busybox";  // Debian busybox-static
constexpr const char* kImage = "localhost/tessera-test-busybox:1";
constexpr const char* kTestVendor = "tessera-test.example";

std::string PodmanDir() {
  return std::string(TESSERA_BINARY_DIR) + "/podman";
}

// Builds a rootfs with /bin/busybox and one symlink per applet, tars it and imports it.
std::string ImportImage(const Podman& podman) {
  std::string work = PodmanDir() + "/rootfs-" + std::to_string(::getpid());
  std::error_code ignored;
  fs::remove_all(work, ignored);
  fs::create_directories(work + "/rootfs/bin");
  for (const char* dir : {"dev", "proc", "sys", "etc", "tmp", "run", "usr/lib", "usr/bin"}) {
    fs::create_directories(work + "/rootfs/" + dir);
  }
  std::error_code error;
  fs::copy_file(kBusybox, work + "/rootfs/bin/busybox", error);
  if (error) return std::string("copy ") + kBusybox + ": " + error.message();
  CommandResult list = RunArgv({kBusybox, "--list"});
  if (list.status != 0) return "busybox --list failed: " + list.output;
  size_t start = 0;
  while (start < list.output.size()) {
    size_t end = list.output.find('\n', start);
    if (end == std::string::npos) end = list.output.size();
    std::string applet = list.output.substr(start, end - start);
    start = end + 1;
    if (applet.empty() || applet == "busybox") continue;
    fs::create_symlink("busybox", work + "/rootfs/bin/" + applet, ignored);
  }
  std::string tar = work + "/rootfs.tar";
  CommandResult packed = RunArgv({"tar", "-C", work + "/rootfs", "-cf", tar, "."});
  if (packed.status != 0) return "tar: " + packed.output;
  CommandResult imported = podman.Run({"import", "-q", tar, kImage});
  fs::remove_all(work, ignored);
  if (imported.status != 0) return "podman import: " + imported.output;
  return {};
}

}  // namespace

CommandResult RunArgv(const std::vector<std::string>& argv) {
  CommandResult result;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    result.output = std::string("pipe: ") + std::strerror(errno);
    return result;
  }
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    std::vector<char*> args;
    for (const auto& arg : argv)
      args.push_back(const_cast<char*>(arg.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "exec %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(fds[1]);
  char buffer[4096];
  for (;;) {
    ssize_t n = ::read(fds[0], buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    result.output.append(buffer, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

Podman::Podman() : image_(kImage), conf_(PodmanDir() + "/containers.conf") {
  std::error_code error;
  fs::create_directories(PodmanDir(), error);
  if (error) {
    error_ = "create " + PodmanDir() + ": " + error.message();
    return;
  }
  {
    std::ofstream conf(conf_ + ".tmp");
    conf << "# Written by the test harness: runc (crun fails on this kernel's hybrid cgroups) and\n"
            "# ulimits below the hard limits this machine allows.\n"
            "[containers]\n"
            "default_ulimits = [\"nofile=1024:1024\", \"nproc=1024:1024\"]\n"
            "[engine]\n"
            "runtime = \"runc\"\n";
  }
  fs::rename(conf_ + ".tmp", conf_, error);
  ::setenv("CONTAINERS_CONF", conf_.c_str(), 1);

  // One import per build tree even with parallel test processes.
  int lock = ::open((PodmanDir() + "/image.lock").c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  if (lock < 0 || ::flock(lock, LOCK_EX) != 0) {
    error_ = std::string("lock image: ") + std::strerror(errno);
    if (lock >= 0) ::close(lock);
    return;
  }
  if (Run({"image", "exists", kImage}).status != 0) error_ = ImportImage(*this);
  ::close(lock);

  // Spec files left by a test process that died (pid no longer alive) would conflict with
  // nothing (kinds are unique) but clutter the directory: remove them.
  for (const char* dir : {"/var/run/cdi", "/etc/cdi"}) {
    for (const auto& entry : fs::directory_iterator(dir, error)) {
      std::string name = entry.path().filename().string();
      if (name.rfind(std::string(kTestVendor) + "-", 0) != 0) continue;
      // <vendor>-<class>-<pid>-<n>.json
      auto dash = name.rfind('-');
      auto pid_dash = dash == std::string::npos ? dash : name.rfind('-', dash - 1);
      if (pid_dash == std::string::npos) continue;
      int pid = std::atoi(name.substr(pid_dash + 1, dash - pid_dash - 1).c_str());
      if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) fs::remove(entry.path(), error);
    }
  }
}

const Podman& Podman::Get() {
  static const Podman podman;
  return podman;
}

CommandResult Podman::Run(const std::vector<std::string>& args) const {
  std::vector<std::string> argv = {"podman"};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunArgv(argv);
}

CommandResult Podman::RunShell(const std::vector<std::string>& run_args,
                               const std::string& script) const {
  std::vector<std::string> args = {"run", "--rm", "--network", "none"};
  args.insert(args.end(), run_args.begin(), run_args.end());
  args.insert(args.end(), {image_, "/bin/sh", "-c", script});
  return Run(args);
}

std::vector<uint32_t> ContainerHostPids(const Podman& podman, const std::string& name,
                                        size_t at_least) {
  std::vector<uint32_t> pids;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    pids.clear();
    std::istringstream top(podman.Run({"top", name, "hpid"}).output);
    std::string line;
    std::getline(top, line);  // the header
    while (std::getline(top, line)) {
      while (!line.empty() && (line.back() == ' ' || line.back() == '\r'))
        line.pop_back();
      if (!line.empty() && line.find_first_not_of("0123456789") == std::string::npos)
        pids.push_back(static_cast<uint32_t>(std::stoul(line)));
    }
    if (pids.size() >= at_least) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return pids;
}

std::string UniqueTestKind(const std::string& class_prefix) {
  static std::atomic<int> counter{0};
  return std::string(kTestVendor) + "/" + class_prefix + "-" + std::to_string(::getpid()) + "-" +
         std::to_string(++counter);
}

InstalledSpec::InstalledSpec(const std::string& content, const std::string& file_name,
                             const std::string& dir)
    : path_(dir + "/" + file_name) {
  std::error_code error;
  fs::create_directories(dir, error);
  std::string temp = path_ + ".tmp";
  {
    std::ofstream out(temp);
    out << content;
    ok_ = static_cast<bool>(out);
  }
  // Renamed into place so podman never reads a half-written spec.
  ok_ = ok_ && ::rename(temp.c_str(), path_.c_str()) == 0;
}

InstalledSpec::~InstalledSpec() {
  ::unlink(path_.c_str());
}

void RemoveInstanceContainers(const std::string& instance) {
  auto listed = RunArgv({"podman", "ps", "-aq", "--filter", "label=tessera.instance=" + instance});
  std::istringstream ids(listed.output);
  std::vector<std::string> argv = {"podman", "rm", "-f", "-t", "0"};
  for (std::string id; ids >> id;)
    argv.push_back(id);
  if (argv.size() > 5) RunArgv(argv);
}

void RemoveSpecsOfKind(const std::string& kind) {
  std::string file = kind;
  std::replace(file.begin(), file.end(), '/', '-');
  ::unlink(("/var/run/cdi/" + file + ".json").c_str());
  ::unlink(("/var/run/cdi/" + file + "-nvswitch.json").c_str());
}

}  // namespace tessera::testing

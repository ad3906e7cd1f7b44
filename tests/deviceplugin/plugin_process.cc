#include "deviceplugin/plugin_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace tessera::testing {

PluginProcess::PluginProcess(const std::string& binary, const std::vector<std::string>& args,
                             const std::string& log_path, size_t address_space)
    : log_path_(log_path) {
  std::vector<std::string> all = {binary};
  all.insert(all.end(), args.begin(), args.end());
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    if (address_space > 0) {
      rlimit limit{address_space, address_space};
      ::setrlimit(RLIMIT_AS, &limit);
    }
    std::vector<char*> argv;
    for (auto& arg : all)
      argv.push_back(arg.data());
    argv.push_back(nullptr);
    ::execv(binary.c_str(), argv.data());
    ::_exit(127);
  }
}

PluginProcess::~PluginProcess() {
  Stop();
}

void PluginProcess::Signal(int signo) {
  if (pid_ > 0) ::kill(pid_, signo);
}

int PluginProcess::Stop() {
  if (pid_ <= 0) return -1;
  ::kill(pid_, SIGTERM);
  int status = 0;
  // Escalate only if it does not stop within 30 s: a loaded machine may take seconds.
  for (int i = 0; i < 3000; ++i) {
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  return 128 + SIGKILL;
}

std::string PluginProcess::Log() const {
  std::ifstream in(log_path_);
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

long PluginProcess::PeakRssKb() const {
  std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

std::string DevicePluginBinary() {
  return std::string(TESSERA_BINARY_DIR) + "/src/cli/tessera-device-plugin";
}

}  // namespace tessera::testing

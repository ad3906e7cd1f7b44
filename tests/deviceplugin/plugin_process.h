// The real tessera-device-plugin as a child process, for end-to-end tests and benchmarks.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>
#include <vector>

namespace tessera::testing {

class PluginProcess {
 public:
  // Starts `binary args...` with stderr and stdout into `log_path`, under RLIMIT_AS =
  // `address_space` when given.
  PluginProcess(const std::string& binary, const std::vector<std::string>& args,
                const std::string& log_path, size_t address_space = 0);
  ~PluginProcess();
  PluginProcess(const PluginProcess&) = delete;
  PluginProcess& operator=(const PluginProcess&) = delete;

  pid_t pid() const { return pid_; }
  void Signal(int signo);
  // SIGTERM and wait; returns the exit status (or 128 + signal).
  int Stop();
  std::string Log() const;
  // Peak resident set (VmHWM) in kB from /proc/<pid>/status; -1 when unreadable.
  long PeakRssKb() const;

 private:
  pid_t pid_ = -1;
  std::string log_path_;
};

// <build>/src/cli/tessera-device-plugin
std::string DevicePluginBinary();

}  // namespace tessera::testing

// tessera-lease-sync (the node agent) as a child process for tests and benchmarks: started with
// flags, stderr to a log file, stopped with SIGTERM (or killed with any signal) and reaped.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "support/wait.h"

namespace tessera::testing {

class LeaseSyncProcess {
 public:
  // `log`: where its stderr goes (appended); empty: the test's own stderr.
  explicit LeaseSyncProcess(const std::vector<std::string>& args, std::string log = "")
      : log_(std::move(log)) {
    std::string binary = std::string(TESSERA_BINARY_DIR) + "/src/cli/tessera-lease-sync";
    std::vector<std::string> argv = {binary};
    argv.insert(argv.end(), args.begin(), args.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      if (!log_.empty() && !std::freopen(log_.c_str(), "a", stderr)) ::_exit(126);
      std::vector<char*> raw;
      for (auto& arg : argv)
        raw.push_back(arg.data());
      raw.push_back(nullptr);
      ::execv(binary.c_str(), raw.data());
      ::_exit(127);
    }
  }
  ~LeaseSyncProcess() { Kill(SIGTERM); }
  LeaseSyncProcess(const LeaseSyncProcess&) = delete;
  LeaseSyncProcess& operator=(const LeaseSyncProcess&) = delete;

  // Sends `signal` and reaps it.
  void Kill(int signal) {
    if (pid_ <= 0) return;
    ::kill(pid_, signal);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  pid_t pid() const { return pid_; }

  std::string Log() const {
    std::ifstream in(log_);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  // The port of its /metrics endpoint, from the line it logs once it listens (0: none came).
  uint16_t MetricsPort() const {
    uint16_t port = 0;
    WaitUntil([&] {
      std::smatch match;
      const std::string log = Log();
      if (std::regex_search(log, match, std::regex("/metrics on port (\\d+)")))
        port = static_cast<uint16_t>(std::stoi(match[1]));
      return port != 0;
    });
    return port;
  }

 private:
  std::string log_;
  pid_t pid_ = -1;
};

}  // namespace tessera::testing

#include "support/hostile_files.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <stdexcept>
#include <thread>

namespace tessera::testing {

HostileFiles::HostileFiles(const std::string& suffix) {
  for (const char* kind : {"/dev/zero", "symlink to /dev/zero", "FIFO", "2 GiB sparse file"}) {
    std::string name = kind;
    for (char& c : name)
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '-';
    std::string path = dir_.path() + "/" + name + suffix;
    if (std::string(kind) == "/dev/zero") {
      path = "/dev/zero";  // the flag names the device itself
    } else {
      Make(kind, path);
    }
    files_.push_back({kind, path});
  }
}

void HostileFiles::Make(const std::string& kind, const std::string& path) {
  ::unlink(path.c_str());
  bool made = false;
  if (kind == "/dev/zero" || kind == "symlink to /dev/zero") {
    // A file a program finds by its own name (a checkpoint, a spec in a dir) can only be
    // /dev/zero through a symlink.
    made = ::symlink("/dev/zero", path.c_str()) == 0;
  } else if (kind == "FIFO") {
    made = ::mkfifo(path.c_str(), 0600) == 0;
  } else if (kind == "2 GiB sparse file") {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    made = fd >= 0 && ::ftruncate(fd, off_t{2} << 30) == 0;
    if (fd >= 0) ::close(fd);
  }
  if (!made) throw std::runtime_error("cannot make " + kind + " at " + path);
}

LimitedRun RunUnderLimits(const std::vector<std::string>& argv, size_t address_space,
                          std::chrono::milliseconds timeout, const std::vector<std::string>& env) {
  LimitedRun run;
  TempDir dir;
  const std::string log = dir.path() + "/output";
  const auto start = std::chrono::steady_clock::now();
  pid_t pid = ::fork();
  if (pid == 0) {
    int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int in = ::open("/dev/null", O_RDONLY);
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(out, 2);
    rlimit limit{address_space, address_space};
    ::setrlimit(RLIMIT_AS, &limit);
    for (const auto& entry : env)
      ::putenv(const_cast<char*>(entry.c_str()));
    std::vector<char*> args;
    for (const auto& arg : argv)
      args.push_back(const_cast<char*>(arg.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  int status = 0;
  for (;;) {
    pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (std::chrono::steady_clock::now() - start > timeout) {
      run.timed_out = true;
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  run.took = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  int fd = ::open(log.c_str(), O_RDONLY);
  char buffer[4096];
  ssize_t n;
  while (fd >= 0 && (n = ::read(fd, buffer, sizeof buffer)) > 0)
    run.output.append(buffer, static_cast<size_t>(n));
  if (fd >= 0) ::close(fd);
  return run;
}

std::string AliasBomb(const std::string& head, const std::string& key) {
  std::string text = head + key + ":\n  - &a [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (char level = 'b'; level <= 'i'; ++level) {
    text += std::string("  - &") + level + " [";
    for (int i = 0; i < 10; ++i)
      text += std::string(i ? ", " : "") + "*" + static_cast<char>(level - 1);
    text += "]\n";
  }
  return text;
}

std::string RefusalProblem(const LimitedRun& run, const std::string& path,
                           const std::string& reason) {
  std::string problem;
  if (run.timed_out) {
    problem = "still running after " + std::to_string(run.took.count()) + " ms";
  } else if (run.exit_code == 0 || run.exit_code >= 128) {
    problem = "exit status " + std::to_string(run.exit_code);
  } else if (run.output.find(path) == std::string::npos) {
    problem = "output does not name " + path;
  } else if (run.output.find(reason) == std::string::npos) {
    problem = "output does not say \"" + reason + "\"";
  }
  return problem.empty() ? "" : problem + "; output:\n" + run.output.substr(0, 2000);
}

std::string ReasonFor(const HostileFile& file) {
  if (file.kind == "FIFO") return "a FIFO, not a regular file";
  if (file.kind == "2 GiB sparse file") return "larger than";
  return "a character device, not a regular file";
}

}  // namespace tessera::testing

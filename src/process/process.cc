#include "process/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>

extern char** environ;

namespace tessera::process {
namespace {

void Append(std::string& buffer, const char* data, size_t size, size_t max_output) {
  buffer.append(data, size);
  if (buffer.size() > max_output) buffer.erase(0, buffer.size() - max_output);
}

int DecodeStatus(int raw) {
  if (WIFEXITED(raw)) return WEXITSTATUS(raw);
  if (WIFSIGNALED(raw)) return 128 + WTERMSIG(raw);
  return -1;
}

Result<Child> SpawnWith(const std::vector<std::string>& argv, bool capture_stderr) {
  if (argv.empty()) return InvalidArgument("run: empty command");
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return ErrnoError("pipe", errno);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 1);
  if (capture_stderr) {
    posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 2);
  } else {
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  }
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Own process group, so a time-out kills what the program started too; default signal
  // handling, since the service ignores SIGPIPE.
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  sigaddset(&defaults, SIGTERM);
  sigaddset(&defaults, SIGINT);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  std::vector<char*> args;
  for (const auto& arg : argv)
    args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  int rc = ::posix_spawnp(&pid, argv[0].c_str(), &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(pipe_fds[1]);
  if (rc != 0) {
    ::close(pipe_fds[0]);
    return ErrnoError("start " + argv[0], rc);
  }
  return Child{pid, pipe_fds[0]};
}

}  // namespace

Result<Child> Spawn(const std::vector<std::string>& argv) {
  return SpawnWith(argv, true);
}

Outcome Finish(Child child, size_t max_output) {
  Outcome outcome;
  char buffer[8192];
  for (;;) {
    ssize_t n = ::read(child.output_fd, buffer, sizeof(buffer));
    if (n > 0) {
      Append(outcome.output, buffer, static_cast<size_t>(n), max_output);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;
  }
  ::close(child.output_fd);
  int raw = 0;
  while (::waitpid(child.pid, &raw, 0) < 0 && errno == EINTR) {
  }
  outcome.status = DecodeStatus(raw);
  return outcome;
}

Result<Outcome> Run(const std::vector<std::string>& argv, const Options& options) {
  auto child = SpawnWith(argv, options.capture_stderr);
  if (!child) return child.error();
  Outcome outcome;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(options.timeout_ms);
  char buffer[8192];
  for (;;) {
    int wait_ms = -1;
    if (options.timeout_ms >= 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                      deadline - std::chrono::steady_clock::now())
                      .count();
      if (left <= 0) {
        outcome.timed_out = true;
        ::kill(-child->pid, SIGKILL);
        break;
      }
      wait_ms = static_cast<int>(left);
    }
    pollfd fd{child->output_fd, POLLIN, 0};
    int ready = ::poll(&fd, 1, wait_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) continue;  // deadline check on the next round
    ssize_t n = ::read(child->output_fd, buffer, sizeof(buffer));
    if (n > 0) {
      Append(outcome.output, buffer, static_cast<size_t>(n), options.max_output);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;  // EOF: every writer closed its end
  }
  ::close(child->output_fd);
  int raw = 0;
  while (::waitpid(child->pid, &raw, 0) < 0 && errno == EINTR) {
  }
  outcome.status = DecodeStatus(raw);
  return outcome;
}

std::string Describe(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& arg : argv) {
    if (!out.empty()) out += ' ';
    if (arg.find_first_of(" \t'\"") == std::string::npos && !arg.empty()) {
      out += arg;
    } else {
      out += '\'' + arg + '\'';
    }
  }
  return out;
}

std::string FindExecutable(const std::string& program) {
  if (program.empty()) return "";
  if (program.find('/') != std::string::npos)
    return ::access(program.c_str(), X_OK) == 0 ? program : "";
  const char* path = std::getenv("PATH");
  const std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string candidate = dirs.substr(start, end - start) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return "";
}

}  // namespace tessera::process

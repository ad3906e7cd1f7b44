#include "process/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

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

// This process's environment with `overrides` ("NAME=value") set on top.
std::vector<std::string> EnvironmentWith(const std::vector<std::string>& overrides) {
  std::vector<std::string> out;
  auto name_of = [](const std::string& entry) { return entry.substr(0, entry.find('=')); };
  for (char** e = environ; e && *e; ++e) {
    std::string entry = *e;
    const std::string name = name_of(entry);
    bool replaced = false;
    for (const auto& o : overrides)
      replaced = replaced || name_of(o) == name;
    if (!replaced) out.push_back(std::move(entry));
  }
  out.insert(out.end(), overrides.begin(), overrides.end());
  return out;
}

struct Spawned {
  pid_t pid = -1;
  int output_fd = -1;  // -1 when output goes to a file
  int input_fd = -1;   // -1 when stdin is /dev/null
};

// The descriptors a child starts with: the output pipe (or the output file) and, when there is
// input, the input pipe. All close-on-exec; the child's ends are dup'ed onto its stdio.
struct ChildFds {
  int output[2] = {-1, -1};
  int input[2] = {-1, -1};
  int file = -1;

  int child_output() const { return file >= 0 ? file : output[1]; }
  void CloseAll() {
    for (int fd : {output[0], output[1], input[0], input[1], file})
      if (fd >= 0) ::close(fd);
  }
};

Status OpenChildFds(const Options& options, ChildFds* fds) {
  if (options.output_file.empty()) {
    if (::pipe2(fds->output, O_CLOEXEC) != 0) return ErrnoError("pipe", errno);
  } else {
    fds->file =
        ::open(options.output_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fds->file < 0) return ErrnoError("open " + options.output_file, errno);
  }
  if (!options.input.empty() && ::pipe2(fds->input, O_CLOEXEC) != 0) {
    int saved = errno;
    fds->CloseAll();
    return ErrnoError("pipe", saved);
  }
  return Ok();
}

// The child's stdin (the input pipe or /dev/null), stdout, and stderr (with stdout, or
// /dev/null); nothing else of ours.
void SetChildStdio(const ChildFds& fds, const Options& options,
                   posix_spawn_file_actions_t* actions) {
  if (fds.input[0] >= 0) {
    posix_spawn_file_actions_adddup2(actions, fds.input[0], 0);
  } else {
    posix_spawn_file_actions_addopen(actions, 0, "/dev/null", O_RDONLY, 0);
  }
  posix_spawn_file_actions_adddup2(actions, fds.child_output(), 1);
  if (options.capture_stderr || fds.file >= 0) {
    posix_spawn_file_actions_adddup2(actions, fds.child_output(), 2);
  } else {
    posix_spawn_file_actions_addopen(actions, 2, "/dev/null", O_WRONLY, 0);
  }
  // Stdio only: every descriptor of ours is close-on-exec where it is made (common/cloexec.h);
  // this catches one a library opened without the flag.
  posix_spawn_file_actions_addclosefrom_np(actions, 3);
}

// Own process group, so a time-out kills what the program started too; default signal
// handling, since the service ignores SIGPIPE.
void SetChildGroupAndSignals(posix_spawnattr_t* attr) {
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  sigaddset(&defaults, SIGTERM);
  sigaddset(&defaults, SIGINT);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(attr, &defaults);
  posix_spawnattr_setsigmask(attr, &none);
  posix_spawnattr_setpgroup(attr, 0);
  posix_spawnattr_setflags(attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
}

// Starts argv (looked up in PATH) on `fds`; returns posix_spawnp's error number, 0 on success.
int SpawnChild(const std::vector<std::string>& argv, const Options& options, const ChildFds& fds,
               pid_t* pid) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  SetChildStdio(fds, options, &actions);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  SetChildGroupAndSignals(&attr);
  std::vector<char*> args;
  for (const auto& arg : argv)
    args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_storage;
  std::vector<char*> env;
  if (!options.environment.empty()) {
    env_storage = EnvironmentWith(options.environment);
    for (auto& entry : env_storage)
      env.push_back(entry.data());
    env.push_back(nullptr);
  }
  int rc = ::posix_spawnp(pid, argv[0].c_str(), &actions, &attr, args.data(),
                          env.empty() ? environ : env.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  return rc;
}

// Small inputs (commands) fit the pipe's buffer: written whole, then closed so the program
// sees its end. A program that exits without reading gives EPIPE, no error of ours: SIGPIPE
// is blocked in this thread meanwhile and a pending one is taken back.
void WriteInputAndClose(int fd, const std::string& input) {
  sigset_t pipe_signal, previous;
  sigemptyset(&pipe_signal);
  sigaddset(&pipe_signal, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &pipe_signal, &previous);
  size_t done = 0;
  while (done < input.size()) {
    ssize_t n = ::write(fd, input.data() + done, input.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  const timespec no_wait{0, 0};
  while (::sigtimedwait(&pipe_signal, nullptr, &no_wait) == SIGPIPE) {
  }
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
}

Result<Spawned> SpawnWith(const std::vector<std::string>& argv, const Options& options) {
  if (argv.empty()) return InvalidArgument("run: empty command");
  ChildFds fds;
  if (auto opened = OpenChildFds(options, &fds); !opened) return opened.error();
  pid_t pid = -1;
  int rc = SpawnChild(argv, options, fds, &pid);
  Spawned spawned;
  spawned.output_fd = fds.output[0];
  spawned.input_fd = fds.input[1];
  fds.output[0] = fds.input[1] = -1;
  fds.CloseAll();  // the child's ends
  if (rc != 0) {
    if (spawned.output_fd >= 0) ::close(spawned.output_fd);
    if (spawned.input_fd >= 0) ::close(spawned.input_fd);
    return ErrnoError("start " + argv[0], rc);
  }
  spawned.pid = pid;
  if (spawned.input_fd >= 0) {
    WriteInputAndClose(spawned.input_fd, options.input);
    spawned.input_fd = -1;
  }
  return spawned;
}

// Waits for `pid` until the deadline (timeout_ms < 0: none); kills its group at the deadline.
int WaitFor(pid_t pid, int timeout_ms, bool* timed_out) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  int raw = 0;
  auto pause = std::chrono::microseconds(500);
  for (;;) {
    pid_t done = ::waitpid(pid, &raw, timeout_ms < 0 ? 0 : WNOHANG);
    if (done == pid) return DecodeStatus(raw);
    if (done < 0 && errno != EINTR) return -1;
    if (timeout_ms >= 0 && std::chrono::steady_clock::now() >= deadline) {
      *timed_out = true;
      ::kill(-pid, SIGKILL);
      while (::waitpid(pid, &raw, 0) < 0 && errno == EINTR) {
      }
      return DecodeStatus(raw);
    }
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(10));
  }
}

}  // namespace

Result<Child> Spawn(const std::vector<std::string>& argv) {
  auto spawned = SpawnWith(argv, Options{});
  if (!spawned) return spawned.error();
  return Child{spawned->pid, spawned->output_fd};
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

Result<pid_t> StartBackground(const std::vector<std::string>& argv, const Options& options) {
  if (options.output_file.empty())
    return InvalidArgument("start " + (argv.empty() ? std::string("?") : argv[0]) +
                           ": a background program needs an output file");
  Options started = options;
  started.input.clear();
  auto child = SpawnWith(argv, started);
  if (!child) return child.error();
  return child->pid;
}

Result<Outcome> Run(const std::vector<std::string>& argv, const Options& options) {
  auto child = SpawnWith(argv, options);
  if (!child) return child.error();
  Outcome outcome;
  if (child->output_fd < 0) {
    outcome.status = WaitFor(child->pid, options.timeout_ms, &outcome.timed_out);
    return outcome;
  }
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

// Running a program without a shell: fork + execvp, stdout and stderr on separate pipes.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "common/cloexec.h"
#include "tenancy/tenancy.h"

namespace tessera::tenancy {
namespace {

int64_t NowMs() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { Close(); }
  int get() const { return fd_; }
  int* out() { return &fd_; }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

}  // namespace

Result<CommandOutput> RunCommand(const std::vector<std::string>& argv, int timeout_ms) {
  if (argv.empty()) return InvalidArgument("run: empty argv");
  int out_pipe[2];
  int err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return ErrnoError("pipe", errno);
  Fd out_read(out_pipe[0]), out_write(out_pipe[1]);
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) return ErrnoError("pipe", errno);
  Fd err_read(err_pipe[0]), err_write(err_pipe[1]);

  std::vector<char*> args;
  for (const auto& arg : argv)
    args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);

  pid_t pid = ::fork();
  if (pid < 0) return ErrnoError("fork", errno);
  if (pid == 0) {
    // Only async-signal-safe calls between fork and exec.
    ::dup2(out_write.get(), 1);
    ::dup2(err_write.get(), 2);
    int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devnull >= 0) ::dup2(devnull, 0);
    // Stdio only, should a library have opened a descriptor without close-on-exec.
    CloseDescriptorsFrom(3);
    ::execvp(args[0], args.data());
    const char* message = "exec failed\n";
    ssize_t ignored = ::write(2, message, std::strlen(message));
    (void)ignored;
    ::_exit(127);
  }
  out_write.Close();
  err_write.Close();

  CommandOutput result;
  const int64_t deadline = NowMs() + timeout_ms;
  bool out_open = true, err_open = true, killed = false;
  char buffer[8192];
  while (out_open || err_open) {
    pollfd fds[2] = {{out_open ? out_read.get() : -1, POLLIN, 0},
                     {err_open ? err_read.get() : -1, POLLIN, 0}};
    int64_t left = deadline - NowMs();
    if (left <= 0) {
      ::kill(pid, SIGKILL);
      killed = true;
      break;
    }
    int ready = ::poll(fds, 2, static_cast<int>(left));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      ssize_t n = ::read(fds[i].fd, buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        (i == 0 ? out_open : err_open) = false;
        continue;
      }
      (i == 0 ? result.out : result.err).append(buffer, static_cast<size_t>(n));
    }
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (killed) {
    return Unavailable(argv[0] + ": no answer within " + std::to_string(timeout_ms) + " ms");
  }
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (result.status == 127 && result.err == "exec failed\n") {
    return Unavailable(argv[0] + ": cannot be executed (not installed?)");
  }
  return result;
}

}  // namespace tessera::tenancy

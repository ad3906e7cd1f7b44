// Reads that a tenant cannot turn against the reader: the pipe directory is a container's to
// write where the runtime lets it (docs/sharing.md), so nothing in it is opened blindly.
#include "mps/guarded_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "common/bounded_file.h"

namespace tessera::mps::internal {

Result<std::string> ReadGuardedTail(const std::string& path, size_t max_bytes, Owner owner) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    const int error = errno;
    // O_NOFOLLOW on a symlink: ELOOP.
    if (error == ELOOP) return FailedPrecondition(path + ": a symlink, not tessera's file");
    return ErrnoError("open " + path, error);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int error = errno;
    ::close(fd);
    return ErrnoError("stat " + path, error);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return FailedPrecondition(path + ": " + FileKind(st.st_mode) + ", not a regular file");
  }
  if (owner == Owner::kThisUser && st.st_uid != ::geteuid()) {
    ::close(fd);
    return FailedPrecondition(path + ": owned by uid " + std::to_string(st.st_uid) +
                              ", not by this service's user");
  }
  if (st.st_size > static_cast<off_t>(max_bytes))
    ::lseek(fd, st.st_size - static_cast<off_t>(max_bytes), SEEK_SET);
  std::string out;
  char buffer[16384];
  while (out.size() < max_bytes) {
    ssize_t n = ::read(fd, buffer, std::min(sizeof buffer, max_bytes - out.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

Status CheckOwnSocket(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return ErrnoError("stat " + path, errno);
  if (!S_ISSOCK(st.st_mode))
    return FailedPrecondition(path + ": " + FileKind(st.st_mode) + ", not the daemon's socket");
  if (st.st_uid != ::geteuid())
    return FailedPrecondition(path + ": a socket of uid " + std::to_string(st.st_uid) +
                              ", not of this service's user");
  return Ok();
}

std::optional<process::ProcStat> ReadProcStat(uint32_t pid) {
  if (pid == 0) return std::nullopt;
  auto text = ReadGuardedTail("/proc/" + std::to_string(pid) + "/stat", process::kMaxProcStatBytes,
                              Owner::kAny);
  if (!text) return std::nullopt;
  return process::ParseProcStat(*text);
}

bool IsRunning(const ProcessIdentity& daemon) {
  if (daemon.pid == 0) return false;
  // A child of ours that ended stays a zombie until reaped; init reaps the others.
  ::waitpid(static_cast<pid_t>(daemon.pid), nullptr, WNOHANG);
  auto stat = ReadProcStat(daemon.pid);
  return stat && stat->state != 'Z' && stat->state != 'X' && stat->start_time == daemon.start_time;
}

std::optional<ProcessIdentity> IdentityOf(uint32_t pid) {
  auto stat = ReadProcStat(pid);
  if (!stat || stat->state == 'Z' || stat->state == 'X') return std::nullopt;
  return ProcessIdentity{pid, stat->start_time};
}

}  // namespace tessera::mps::internal

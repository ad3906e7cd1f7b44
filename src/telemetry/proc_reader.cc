// /proc/<pid>/cgroup and /proc/<pid>/stat of a GPU process: the kernel's record of where the
// process runs and when it started, which no process can forge for itself (see cgroup_path.cc
// for why the outermost container decides, proc_stat.cc for the start time).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "telemetry/telemetry.h"

namespace tessera::telemetry {
namespace {

// A file of /proc/<pid>, at most `max` bytes (kMaxCgroupFile at most). Opened without blocking and
// read only when it is a regular file: whatever stands at the path of a directory an operator
// named, a FIFO or a device never stalls the pass.
Result<std::string> ReadPidFile(const std::string& proc_dir, uint32_t pid, const char* name,
                                size_t max) {
  const std::string path = proc_dir + "/" + std::to_string(pid) + "/" + name;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
  if (fd < 0) {
    if (errno == ENOENT || errno == ESRCH) return NotFound("process " + std::to_string(pid));
    return ErrnoError("open " + path, errno);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgument(path + ": not a regular file");
  }
  char buffer[kMaxCgroupFile];
  max = std::min(max, sizeof buffer);
  size_t used = 0;
  while (used < max) {
    const ssize_t n = ::read(fd, buffer + used, max - used);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      // A process that exited between open and read.
      if (error == ESRCH) return NotFound("process " + std::to_string(pid));
      return ErrnoError("read " + path, error);
    }
    if (n == 0) break;
    used += static_cast<size_t>(n);
  }
  ::close(fd);
  return std::string(buffer, used);
}

}  // namespace

Result<std::string> ReadProcCgroup(const std::string& proc_dir, uint32_t pid) {
  return ReadPidFile(proc_dir, pid, "cgroup", kMaxCgroupFile);
}

Result<std::string> ReadProcStat(const std::string& proc_dir, uint32_t pid) {
  return ReadPidFile(proc_dir, pid, "stat", kMaxStatFile);
}

Status CheckProcDir(const std::string& proc_dir) {
  if (proc_dir.empty() || proc_dir.front() != '/')
    return InvalidArgument("proc directory '" + proc_dir + "': not an absolute path");
  struct stat st {};
  if (::stat(proc_dir.c_str(), &st) != 0) {
    Error error = ErrnoError("proc directory " + proc_dir, errno);
    error.category = ErrorCategory::kInvalidArgument;  // a flag's value, refused at start
    return error;
  }
  if (!S_ISDIR(st.st_mode))
    return InvalidArgument("proc directory " + proc_dir + ": not a directory");
  return Ok();
}

}  // namespace tessera::telemetry

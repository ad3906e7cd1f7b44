// /proc/<pid>/cgroup of a GPU process: the kernel's record of where the process runs, which no
// process can forge for itself (see cgroup_path.cc for why the outermost container decides).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "telemetry/telemetry.h"

namespace tessera::telemetry {

Result<std::string> ReadProcCgroup(const std::string& proc_dir, uint32_t pid) {
  const std::string path = proc_dir + "/" + std::to_string(pid) + "/cgroup";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT || errno == ESRCH) return NotFound("process " + std::to_string(pid));
    return ErrnoError("open " + path, errno);
  }
  char buffer[kMaxCgroupFile];
  size_t used = 0;
  while (used < sizeof buffer) {
    const ssize_t n = ::read(fd, buffer + used, sizeof buffer - used);
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

}  // namespace tessera::telemetry

#include "common/cloexec.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <memory>

namespace tessera {

Status SetCloseOnExec(int fd) {
  const int flags = ::fcntl(fd, F_GETFD);
  if (flags < 0) return ErrnoError("fcntl F_GETFD", errno);
  if ((flags & FD_CLOEXEC) != 0) return Ok();
  if (::fcntl(fd, F_SETFD, flags | FD_CLOEXEC) != 0) return ErrnoError("fcntl F_SETFD", errno);
  return Ok();
}

bool IsCloseOnExec(int fd) {
  const int flags = ::fcntl(fd, F_GETFD);
  return flags >= 0 && (flags & FD_CLOEXEC) != 0;
}

std::vector<int> InheritableDescriptors() {
  std::vector<int> out;
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir("/proc/self/fd"), &::closedir);
  if (!dir) return out;
  const int own = ::dirfd(dir.get());
  while (const dirent* entry = ::readdir(dir.get())) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd <= 2 || fd == own) continue;
    if (!IsCloseOnExec(static_cast<int>(fd))) out.push_back(static_cast<int>(fd));
  }
  return out;
}

void CloseDescriptorsFrom(int first) noexcept {
  if (first < 0) first = 0;
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
  if (::close_range(static_cast<unsigned>(first), ~0U, 0) == 0) return;
#endif
  // Kernels before 5.9: every descriptor the limit allows.
  rlimit limit{};
  rlim_t last = ::getrlimit(RLIMIT_NOFILE, &limit) == 0 ? limit.rlim_cur : 1024;
  if (last == RLIM_INFINITY || last > (1u << 20)) last = 1u << 20;
  for (rlim_t fd = static_cast<rlim_t>(first); fd < last; ++fd)
    ::close(static_cast<int>(fd));
}

}  // namespace tessera

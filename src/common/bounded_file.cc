#include "common/bounded_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>

#include "common/file_descriptor.h"

namespace tessera {
namespace {

Error NotRegular(const std::string& path, mode_t mode) {
  return InvalidArgument(path + ": " + FileKind(mode) + ", not a regular file");
}

Error TooLarge(const std::string& path, size_t max_bytes) {
  return InvalidArgument(path + ": larger than " + std::to_string(max_bytes) + " bytes");
}

}  // namespace

const char* FileKind(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "an unknown kind of file";
}

Result<std::string> ReadBoundedFile(const std::string& path, size_t max_bytes) {
  // The type first, by name: opening a device is already an effect (a watchdog arms, a tape
  // rewinds), and opening a FIFO for reading waits for a writer.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return ErrnoError("open " + path, errno);
  if (!S_ISREG(st.st_mode)) return NotRegular(path, st.st_mode);
  if (static_cast<uint64_t>(st.st_size) > max_bytes) return TooLarge(path, max_bytes);
  // O_NONBLOCK: should the name have become a FIFO since, the open still returns at once, and
  // the descriptor's own type (fstat) refuses it.
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (fd.get() < 0) return ErrnoError("open " + path, errno);
  if (::fstat(fd.get(), &st) != 0) return ErrnoError("stat " + path, errno);
  if (!S_ISREG(st.st_mode)) return NotRegular(path, st.st_mode);
  if (static_cast<uint64_t>(st.st_size) > max_bytes) return TooLarge(path, max_bytes);
  int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0) {
    return ErrnoError("fcntl " + path, errno);
  }

  std::string out;
  // One read past the limit tells a file that grew (or a procfs file, whose size says 0) from
  // one that fits.
  const size_t want = max_bytes + 1;
  out.resize(std::min(want, static_cast<size_t>(st.st_size) + 1));
  size_t used = 0;
  for (;;) {
    if (used == out.size()) {
      if (out.size() >= want) break;
      out.resize(std::min(want, std::max<size_t>(out.size() * 2, 4096)));
    }
    ssize_t n = ::read(fd.get(), out.data() + used, out.size() - used);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("read " + path, errno);
    if (n == 0) break;
    used += static_cast<size_t>(n);
  }
  if (used > max_bytes) return TooLarge(path, max_bytes);
  out.resize(used);
  return out;
}

}  // namespace tessera

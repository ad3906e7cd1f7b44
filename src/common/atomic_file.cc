#include "common/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <random>

#include "common/bounded_file.h"
#include "common/file_descriptor.h"

namespace tessera {
namespace {

std::string DirectoryOf(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// "<pid>-<random>-<n>": the counter keeps a process's own names apart, the pid other processes'
// (a forked child's too), the random part a dead process's leftovers that had this pid. The random
// part is drawn once: a std::random_device per write cost ~25 us (its set-up queries the CPU, which
// traps in a VM) on every replacement.
std::string TemporarySuffix() {
  static const unsigned random = std::random_device()();
  static std::atomic<uint64_t> counter{0};
  return std::to_string(::getpid()) + "-" + std::to_string(random) + "-" +
         std::to_string(counter.fetch_add(1, std::memory_order_relaxed));
}

// Writes `content` to a new temporary file next to `path`, with `mode` (and fsynced when `sync`);
// returns its name.
Result<std::string> WriteTemporary(const std::string& path, std::string_view content, mode_t mode,
                                   bool sync = true) {
  std::string temp = path + ".tmp-" + TemporarySuffix();
  FileDescriptor fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (fd.get() < 0) return ErrnoError("create " + temp, errno);

  auto fail = [&](std::string_view what) {
    int saved = errno;
    ::unlink(temp.c_str());
    return ErrnoError(std::string(what) + " " + temp, saved);
  };
  size_t written = 0;
  while (written < content.size()) {
    ssize_t n = ::write(fd.get(), content.data() + written, content.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail("write");
    written += static_cast<size_t>(n);
  }
  if (::fchmod(fd.get(), mode) != 0) return fail("chmod");
  if (sync && ::fsync(fd.get()) != 0) return fail("fsync");
  if (::close(fd.release()) != 0) return fail("close");
  return temp;
}

void SyncDirectoryOf(const std::string& path) {
  (void)SyncDirectory(DirectoryOf(path));
}

}  // namespace

Status SyncDirectory(const std::string& dir) {
  FileDescriptor dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.get() < 0) return ErrnoError("open " + dir, errno);
  if (::fsync(dir_fd.get()) != 0) return ErrnoError("fsync " + dir, errno);
  return Ok();
}

Status RemoveFile(const std::string& path, Durability durability) {
  if (::unlink(path.c_str()) != 0) {
    if (errno == ENOENT) return Ok();
    return ErrnoError("remove " + path, errno);
  }
  if (durability == Durability::kPowerLoss) return SyncDirectory(DirectoryOf(path));
  return Ok();
}

Status WriteFileAtomically(const std::string& path, std::string_view content, mode_t mode,
                           Durability durability) {
  const bool sync_file = durability != Durability::kProcessCrash;
  auto temp = WriteTemporary(path, content, mode, sync_file);
  if (!temp) return temp.error();
  if (::rename(temp->c_str(), path.c_str()) != 0) {
    int saved = errno;
    ::unlink(temp->c_str());
    return ErrnoError("rename to " + path + " from " + *temp, saved);
  }
  if (durability == Durability::kPowerLoss) SyncDirectoryOf(path);
  return Ok();
}

Status CreateFileAtomically(const std::string& path, std::string_view content, mode_t mode) {
  auto temp = WriteTemporary(path, content, mode);
  if (!temp) return temp.error();
  int linked = ::link(temp->c_str(), path.c_str());
  int saved = errno;
  ::unlink(temp->c_str());
  if (linked != 0 && saved == EEXIST) return AlreadyExists(path + " already exists");
  if (linked != 0) return ErrnoError("link " + path + " to " + *temp, saved);
  SyncDirectoryOf(path);
  return Ok();
}

Result<std::string> ReadWholeFile(const std::string& path) {
  return ReadBoundedFile(path, kMaxWholeFileBytes);
}

}  // namespace tessera

#include "inventory/host_root.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>

namespace tessera::inventory {

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (name.empty()) return dir;
  if (name.front() == '/') return name;
  if (dir.empty() || dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

std::string NormalizePath(const std::string& path) {
  std::vector<std::string> parts;
  size_t i = 0;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    std::string part = path.substr(i, j - i);
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
    } else if (!part.empty() && part != ".") {
      parts.push_back(std::move(part));
    }
    i = j + 1;
  }
  std::string out;
  for (const auto& part : parts)
    out += "/" + part;
  return out.empty() ? "/" : out;
}

std::string BaseName(const std::string& path) {
  auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string DirName(const std::string& path) {
  auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

namespace {

// Reads everything from fd into out; one read() for sysfs attributes, which the kernel
// returns whole in one call.
Status ReadAll(int fd, const std::string& what, std::string& out, size_t limit) {
  char buffer[8192];
  for (;;) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("read " + what, errno);
    if (n == 0) break;
    out.append(buffer, static_cast<size_t>(n));
    if (out.size() > limit)
      return InvalidArgument("read " + what + ": larger than " + std::to_string(limit) + " bytes");
  }
  return Ok();
}

}  // namespace

HostDirectory::~HostDirectory() {
  if (fd_ >= 0) ::close(fd_);
}

Result<std::string> HostDirectory::ReadFile(const char* name) const {
  std::string what = path_ + "/" + name;
  int fd = ::openat(fd_, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open " + what, errno);
  std::string out;
  Status status = ReadAll(fd, what, out, 1 << 20);
  ::close(fd);
  if (!status) return status.error();
  return out;
}

Result<std::string> HostDirectory::ReadAttribute(const char* name) const {
  std::string what = path_ + "/" + name;
  int fd = ::openat(fd_, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open " + what, errno);
  // sysfs hands a text attribute over whole in the first read (at most one page), so a short
  // read is the end: this halves the system calls of an inventory.
  char buffer[4096];
  ssize_t n;
  do {
    n = ::read(fd, buffer, sizeof buffer);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    int saved = errno;
    ::close(fd);
    return ErrnoError("read " + what, saved);
  }
  std::string value(buffer, static_cast<size_t>(n));
  if (static_cast<size_t>(n) == sizeof buffer) {
    Status rest = ReadAll(fd, what, value, 1 << 20);
    if (!rest) {
      ::close(fd);
      return rest.error();
    }
  }
  ::close(fd);
  while (!value.empty() && (value.back() == '\n' || value.back() == ' '))
    value.pop_back();
  return value;
}

Result<std::string> HostDirectory::ReadLink(const char* name) const {
  char buffer[4096];
  ssize_t n = ::readlinkat(fd_, name, buffer, sizeof buffer);
  if (n < 0) return ErrnoError("readlink " + path_ + "/" + name, errno);
  return std::string(buffer, static_cast<size_t>(n));
}

bool HostDirectory::Has(const char* name) const {
  struct stat st;
  return ::fstatat(fd_, name, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

Result<HostDirectory> HostRoot::OpenDirectory(const std::string& path) const {
  int fd = Open(path, O_PATH | O_DIRECTORY);
  if (fd < 0) return ErrnoError("open " + path, errno);
  return HostDirectory(path, fd);
}

HostRoot::HostRoot(std::string root) : root_(std::move(root)) {
  while (!root_.empty() && root_.back() == '/')
    root_.pop_back();
  root_fd_ = ::open(root_.empty() ? "/" : root_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
}

HostRoot::~HostRoot() {
  if (root_fd_ >= 0) ::close(root_fd_);
}

int HostRoot::Open(const std::string& path, int flags) const {
  if (root_.empty()) return ::open(path.c_str(), flags | O_CLOEXEC);
  if (root_fd_ < 0) {
    errno = ENOENT;
    return -1;
  }
  if (has_openat2_) {
    open_how how{};
    how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
    how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
    const char* relative = path.c_str();
    while (*relative == '/')
      ++relative;
    if (*relative == '\0') relative = ".";
    // With RESOLVE_IN_ROOT the kernel answers EAGAIN when any rename on the system raced a
    // ".." in the walk (sysfs links are full of them): that is "try again", never "absent".
    long fd = -1;
    for (int attempt = 0; attempt < 16; ++attempt) {
      fd = ::syscall(SYS_openat2, root_fd_, relative, &how, sizeof how);
      if (fd >= 0 || errno != EAGAIN) break;
    }
    if (fd >= 0 || (errno != ENOSYS && errno != EAGAIN)) return static_cast<int>(fd);
    // Still racing renames: our own walk below confines the path just the same.
    if (errno == ENOSYS)
      const_cast<HostRoot*>(this)->has_openat2_ = false;  // kernel < 5.6: walk links ourselves
  }
  auto canonical = CanonicalByWalking(path);
  if (!canonical) {
    errno = ENOENT;
    return -1;
  }
  return ::open(Resolve(*canonical).c_str(), flags | O_CLOEXEC | O_NOFOLLOW);
}

std::string HostRoot::Resolve(const std::string& path) const {
  return root_ + path;
}

Result<std::string> HostRoot::ReadFile(const std::string& path, size_t limit) const {
  int fd = Open(path, O_RDONLY);
  if (fd < 0) return ErrnoError("open " + path, errno);
  std::string out;
  // sysfs and procfs report size 4096 or 0 whatever they hold; regular files (pci.ids,
  // ld.so.cache) are read in one call when their size is known.
  struct stat st;
  size_t chunk = 8192;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 4096) {
    chunk = static_cast<size_t>(st.st_size) + 1;
    out.reserve(chunk);
  }
  std::string buffer_storage(chunk, '\0');
  char* buffer = buffer_storage.data();
  for (;;) {
    ssize_t n = ::read(fd, buffer, chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int saved = errno;
      ::close(fd);
      return ErrnoError("read " + path, saved);
    }
    if (n == 0) break;
    out.append(buffer, static_cast<size_t>(n));
    if (out.size() > limit) {
      ::close(fd);
      return InvalidArgument("read " + path + ": larger than " + std::to_string(limit) + " bytes");
    }
  }
  ::close(fd);
  return out;
}

Result<std::string> HostRoot::ReadAttribute(const std::string& path) const {
  auto text = ReadFile(path, 64 * 1024);
  if (!text) return text.error();
  std::string value = std::move(*text);
  while (!value.empty() && (value.back() == '\n' || value.back() == ' '))
    value.pop_back();
  return value;
}

Result<std::string> HostRoot::ReadLink(const std::string& path) const {
  // The parent is resolved inside the root; the link itself is read, not followed.
  int dir = Open(DirName(path), O_PATH | O_DIRECTORY);
  if (dir < 0) return ErrnoError("readlink " + path, errno);
  char buffer[4096];
  ssize_t n = ::readlinkat(dir, BaseName(path).c_str(), buffer, sizeof buffer);
  int saved = errno;
  ::close(dir);
  if (n < 0) return ErrnoError("readlink " + path, saved);
  if (static_cast<size_t>(n) == sizeof buffer)
    return InvalidArgument("readlink " + path + ": too long");
  return std::string(buffer, static_cast<size_t>(n));
}

Result<std::string> HostRoot::ResolveLink(const std::string& path) const {
  auto target = ReadLink(path);
  if (!target) return target.error();
  if (!target->empty() && target->front() == '/') return NormalizePath(*target);
  // The link's own directory may be reached through links (/sys/class/drm/card0 is one), so
  // a relative target is resolved against the directory's real location.
  auto parent = Canonical(DirName(path));
  if (!parent) return parent.error();
  return NormalizePath(JoinPath(*parent, *target));
}

Result<std::string> HostRoot::Canonical(const std::string& path) const {
  int fd = Open(path, O_PATH);
  if (fd < 0) return ErrnoError("resolve " + path, errno);
  char buffer[4096];
  std::string proc_link = "/proc/self/fd/" + std::to_string(fd);
  ssize_t n = ::readlink(proc_link.c_str(), buffer, sizeof buffer);
  ::close(fd);
  if (n <= 0 || static_cast<size_t>(n) == sizeof buffer) return CanonicalByWalking(path);
  std::string real(buffer, static_cast<size_t>(n));
  if (root_.empty()) return real;
  if (real.compare(0, root_.size(), root_) != 0 ||
      (real.size() > root_.size() && real[root_.size()] != '/')) {
    return CanonicalByWalking(path);  // root reached through a bind mount or link: walk instead
  }
  std::string inside = real.substr(root_.size());
  return inside.empty() ? std::string("/") : inside;
}

Result<std::string> HostRoot::CanonicalByWalking(const std::string& path) const {
  // Walk component by component, expanding symlinks inside the root.
  std::string pending = NormalizePath(path);
  std::string done;
  int links = 0;
  size_t i = 1;
  while (i <= pending.size()) {
    size_t j = pending.find('/', i);
    if (j == std::string::npos) j = pending.size();
    std::string part = pending.substr(i, j - i);
    std::string rest = j < pending.size() ? pending.substr(j) : "";
    i = j + 1;
    if (part.empty()) continue;
    std::string candidate = done + "/" + part;
    struct stat st;
    if (::lstat(Resolve(candidate).c_str(), &st) != 0)
      return ErrnoError("stat " + candidate, errno);
    if (S_ISLNK(st.st_mode)) {
      if (++links > 40) return InvalidArgument("resolve " + path + ": too many symlinks");
      auto target = ResolveLink(candidate);
      if (!target) return target.error();
      pending = NormalizePath(*target + rest);
      done.clear();
      i = 1;
      continue;
    }
    done = candidate;
  }
  return done.empty() ? std::string("/") : done;
}

Result<std::string> HostRoot::ReadHead(const std::string& path, size_t bytes) const {
  int fd = Open(path, O_RDONLY);
  if (fd < 0) return ErrnoError("open " + path, errno);
  // One read: a regular file gives all it has up to `bytes` at once.
  std::string out(bytes, '\0');
  ssize_t n;
  do {
    n = ::read(fd, out.data(), bytes);
  } while (n < 0 && errno == EINTR);
  int saved = errno;
  ::close(fd);
  if (n < 0) return ErrnoError("read " + path, saved);
  out.resize(static_cast<size_t>(n));
  return out;
}

Result<std::vector<std::string>> HostRoot::ListDirectory(const std::string& path) const {
  int fd = Open(path, O_RDONLY | O_DIRECTORY);
  if (fd < 0) return ErrnoError("list " + path, errno);
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::fdopendir(fd), &::closedir);
  if (!dir) {
    int saved = errno;
    ::close(fd);
    return ErrnoError("list " + path, saved);
  }
  std::vector<std::string> names;
  while (dirent* entry = ::readdir(dir.get())) {
    std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(std::move(name));
  }
  std::sort(names.begin(), names.end());
  return names;
}

bool HostRoot::Exists(const std::string& path) const {
  int fd = Open(path, O_PATH);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

Status HostRoot::WriteAttribute(const std::string& path, std::string_view value) const {
  int fd = Open(path, O_WRONLY);
  if (fd < 0) return ErrnoError("open " + path + " for writing", errno);
  ssize_t n;
  do {
    n = ::write(fd, value.data(), value.size());
  } while (n < 0 && errno == EINTR);
  int saved = errno;
  ::close(fd);
  if (n < 0) return ErrnoError("write " + path, saved);
  if (static_cast<size_t>(n) != value.size()) return Internal("write " + path + ": short write");
  return Ok();
}

bool HostRoot::OnSysfs(const std::string& path) const {
  int fd = Open(path, O_PATH);
  if (fd < 0) return false;
  struct statfs fs {};
  bool sysfs = ::fstatfs(fd, &fs) == 0 && fs.f_type == SYSFS_MAGIC;
  ::close(fd);
  return sysfs;
}

bool HostRoot::IsSymlink(const std::string& path) const {
  int dir = Open(DirName(path), O_PATH | O_DIRECTORY);
  if (dir < 0) return false;
  struct stat st;
  bool is_link =
      ::fstatat(dir, BaseName(path).c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
  ::close(dir);
  return is_link;
}

}  // namespace tessera::inventory

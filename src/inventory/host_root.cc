#include "inventory/host_root.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
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
  for (const auto& part : parts) out += "/" + part;
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

HostRoot::HostRoot(std::string root) : root_(std::move(root)) {
  while (!root_.empty() && root_.back() == '/') root_.pop_back();
}

std::string HostRoot::Resolve(const std::string& path) const { return root_ + path; }

Result<std::string> HostRoot::ReadFile(const std::string& path, size_t limit) const {
  std::string full = Resolve(path);
  int fd = ::open(full.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open " + path, errno);
  std::string out;
  char buffer[8192];
  for (;;) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
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
  while (!value.empty() && (value.back() == '\n' || value.back() == ' ')) value.pop_back();
  return value;
}

Result<std::string> HostRoot::ReadLink(const std::string& path) const {
  std::string full = Resolve(path);
  char buffer[4096];
  ssize_t n = ::readlink(full.c_str(), buffer, sizeof buffer);
  if (n < 0) return ErrnoError("readlink " + path, errno);
  if (static_cast<size_t>(n) == sizeof buffer) return InvalidArgument("readlink " + path + ": too long");
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
    if (::lstat(Resolve(candidate).c_str(), &st) != 0) return ErrnoError("stat " + candidate, errno);
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

Result<std::vector<std::string>> HostRoot::ListDirectory(const std::string& path) const {
  std::string full = Resolve(path);
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(full.c_str()), &::closedir);
  if (!dir) return ErrnoError("list " + path, errno);
  std::vector<std::string> names;
  while (dirent* entry = ::readdir(dir.get())) {
    std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(std::move(name));
  }
  std::sort(names.begin(), names.end());
  return names;
}

bool HostRoot::Exists(const std::string& path) const {
  auto canonical = Canonical(path);
  return canonical.ok();
}

bool HostRoot::IsSymlink(const std::string& path) const {
  struct stat st;
  return ::lstat(Resolve(path).c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}

}  // namespace tessera::inventory

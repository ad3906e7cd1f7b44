// Root-relative file access: the only place in tessera that opens host files. Paths given to it
// are host paths ("/sys/bus/pci/devices"). Every lookup resolves symlinks *inside* the root
// (openat2 with RESOLVE_IN_ROOT, Linux ≥5.6), so an absolute link under a fixture tree or a
// host mounted at /host never escapes to this process's own /.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace tessera::inventory {

// An open directory under the root (a sysfs device directory, say), so that reading its many
// attributes costs one openat each instead of a full path walk through sysfs symlinks.
// Names are single components; links among them are read, never followed.
class HostDirectory {
 public:
  HostDirectory(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  HostDirectory(HostDirectory&& other) noexcept : path_(std::move(other.path_)), fd_(other.fd_) {
    other.fd_ = -1;
  }
  HostDirectory(const HostDirectory&) = delete;
  HostDirectory& operator=(const HostDirectory&) = delete;
  HostDirectory& operator=(HostDirectory&&) = delete;
  ~HostDirectory();

  const std::string& path() const { return path_; }
  // A text attribute without its trailing newline; errors name "<path>/<name>".
  Result<std::string> ReadAttribute(const char* name) const;
  // A whole file (e.g. `resource`, which can exceed one page on devices with SR-IOV).
  Result<std::string> ReadFile(const char* name) const;
  Result<std::string> ReadLink(const char* name) const;
  bool Has(const char* name) const;

 private:
  std::string path_;
  int fd_;
};

class HostRoot {
 public:
  explicit HostRoot(std::string root);
  HostRoot(const HostRoot&) = delete;
  HostRoot& operator=(const HostRoot&) = delete;
  ~HostRoot();

  const std::string& root() const { return root_; }
  // "<root><path>" for a host path.
  std::string Resolve(const std::string& path) const;

  Result<std::string> ReadFile(const std::string& path, size_t limit = 1 << 20) const;
  // At most the first `bytes` bytes of a regular file (the ELF header of a library, say).
  Result<std::string> ReadHead(const std::string& path, size_t bytes) const;
  // Reads a small sysfs attribute and strips the trailing newline.
  Result<std::string> ReadAttribute(const std::string& path) const;
  Result<HostDirectory> OpenDirectory(const std::string& path) const;
  // Target of a symlink as written (may be relative).
  Result<std::string> ReadLink(const std::string& path) const;
  // Host path a symlink points to, resolved lexically against the link's directory.
  Result<std::string> ResolveLink(const std::string& path) const;
  // The real host path of `path` with every symlink followed inside the root.
  Result<std::string> Canonical(const std::string& path) const;
  // Names in a directory, sorted, without "." and "..".
  Result<std::vector<std::string>> ListDirectory(const std::string& path) const;
  bool Exists(const std::string& path) const;  // follows symlinks inside the root
  bool IsSymlink(const std::string& path) const;
  // Writes `value` to an existing file (a sysfs attribute that acts on the device, such as
  // `rom`); never creates one.
  Status WriteAttribute(const std::string& path, std::string_view value) const;
  // Whether `path` lies on a sysfs mount, where writing an attribute acts on the kernel; under
  // a fixture tree it is a plain file that must be left as it is.
  bool OnSysfs(const std::string& path) const;

 private:
  // Opens `path` resolved inside the root; -1 with errno set on failure.
  int Open(const std::string& path, int flags) const;
  Result<std::string> CanonicalByWalking(const std::string& path) const;

  std::string root_;  // without trailing slash; "" for "/"
  int root_fd_ = -1;  // O_PATH descriptor of the root directory
  bool has_openat2_ = true;
};

// Joins host paths: JoinPath("/sys/bus", "pci") == "/sys/bus/pci".
std::string JoinPath(const std::string& dir, const std::string& name);
// Normalises "." and ".." components of an absolute path; ".." never rises above "/".
std::string NormalizePath(const std::string& path);
std::string BaseName(const std::string& path);
std::string DirName(const std::string& path);

}  // namespace tessera::inventory

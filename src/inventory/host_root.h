// Root-relative file access: the only place in tessera that opens host files. Paths given to it
// are host paths ("/sys/bus/pci/devices"); it prefixes the root. Symlinks are resolved
// lexically inside the root, so an absolute link in a fixture tree never escapes to the real /.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/error.h"

namespace tessera::inventory {

class HostRoot {
 public:
  explicit HostRoot(std::string root);

  const std::string& root() const { return root_; }
  // "<root><path>" for a host path.
  std::string Resolve(const std::string& path) const;

  Result<std::string> ReadFile(const std::string& path, size_t limit = 1 << 20) const;
  // Reads a small sysfs attribute and strips the trailing newline.
  Result<std::string> ReadAttribute(const std::string& path) const;
  // Target of a symlink as written (may be relative).
  Result<std::string> ReadLink(const std::string& path) const;
  // Host path a symlink points to, resolved lexically against the link's directory.
  Result<std::string> ResolveLink(const std::string& path) const;
  // Follows every symlink in `path` (at most 40, like the kernel), inside the root.
  Result<std::string> Canonical(const std::string& path) const;
  // Names in a directory, sorted, without "." and "..".
  Result<std::vector<std::string>> ListDirectory(const std::string& path) const;
  bool Exists(const std::string& path) const;        // follows symlinks inside the root
  bool IsSymlink(const std::string& path) const;

 private:
  std::string root_;  // without trailing slash; "" for "/"
};

// Joins host paths: JoinPath("/sys/bus", "pci") == "/sys/bus/pci".
std::string JoinPath(const std::string& dir, const std::string& name);
// Normalises "." and ".." components of an absolute path; ".." never rises above "/".
std::string NormalizePath(const std::string& path);
std::string BaseName(const std::string& path);
std::string DirName(const std::string& path);

}  // namespace tessera::inventory

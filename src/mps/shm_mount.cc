// The daemon's private shm: a sized tmpfs of its own, so MPS clients never share the host's
// /dev/shm (an --ipc=host in disguise) and cannot fill it past its size.
#include <sys/mount.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <memory>
#include <string>

#include "mps/mps.h"

namespace tessera::mps {
namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string Unescape(const std::string& field) {
  std::string out;
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size()) {
      const std::string digits = field.substr(i + 1, 3);
      if (digits.find_first_not_of("01234567") == std::string::npos) {
        out.push_back(static_cast<char>(std::stoi(digits, nullptr, 8)));
        i += 3;
        continue;
      }
    }
    out.push_back(field[i]);
  }
  return out;
}

}  // namespace

bool IsMountPoint(const std::string& path) {
  // "e": close-on-exec, as every descriptor of the service (common/cloexec.h).
  std::unique_ptr<FILE, int (*)(FILE*)> mountinfo(std::fopen("/proc/self/mountinfo", "re"),
                                                  &std::fclose);
  if (!mountinfo) return false;
  std::string text;
  char buffer[8192];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, mountinfo.get())) > 0)
    text.append(buffer, n);
  for (size_t next = 0; next < text.size();) {
    size_t newline = text.find('\n', next);
    if (newline == std::string::npos) newline = text.size();
    const std::string line = text.substr(next, newline - next);
    next = newline + 1;
    // "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw": the fifth field.
    size_t start = 0;
    for (int field = 0; field < 4 && start != std::string::npos; ++field) {
      start = line.find(' ', start);
      if (start != std::string::npos) ++start;
    }
    if (start == std::string::npos) continue;
    const size_t end = line.find(' ', start);
    if (Unescape(line.substr(start, end - start)) == path) return true;
  }
  return false;
}

Status MountShm(const std::string& path, uint64_t bytes, mode_t mode) {
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST)
    return ErrnoError("mkdir " + path, errno);
  if (IsMountPoint(path)) return Ok();
  char octal[8];
  std::snprintf(octal, sizeof octal, "%o", static_cast<unsigned>(mode & 07777));
  const std::string data = "size=" + std::to_string(bytes) + ",mode=" + octal;
  if (::mount("tmpfs", path.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, data.c_str()) != 0)
    return ErrnoError("mount tmpfs on " + path, errno);
  return Ok();
}

Status UnmountShm(const std::string& path) {
  while (IsMountPoint(path)) {
    if (::umount2(path.c_str(), MNT_DETACH) != 0) {
      if (errno == EINVAL || errno == ENOENT) break;
      return ErrnoError("umount " + path, errno);
    }
  }
  return Ok();
}

}  // namespace tessera::mps

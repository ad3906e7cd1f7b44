#include "serve/flag_paths.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <filesystem>

#include "common/bounded_file.h"
#include "common/untrusted_text.h"
#include "process/process.h"

namespace tessera::serve {
namespace {

std::string Named(std::string_view flag, const std::string& path) {
  return std::string(flag) + " " + Excerpt(path, 200);
}

// The nearest of `path` and its ancestors that exists, and what stat() says of it. A relative
// path's ancestors end at the working directory.
Result<std::pair<std::string, struct stat>> NearestExisting(std::string_view flag,
                                                            const std::string& path) {
  std::filesystem::path at(path);
  for (;;) {
    const std::string text = at.empty() ? "." : at.string();
    struct stat st {};
    if (::stat(text.c_str(), &st) == 0) return std::make_pair(text, st);
    // ENOTDIR: an ancestor is not a directory; it is found further up.
    if (errno != ENOENT && errno != ENOTDIR)
      return ErrnoError(Named(flag, path) + ": stat " + Excerpt(text, 200), errno);
    if (at.empty() || at == at.parent_path()) return NotFound(Named(flag, path) + ": no ancestor");
    at = at.parent_path();
  }
}

// A missing path can be made when what exists of it ends in a directory.
Status CheckAncestor(std::string_view flag, const std::string& path) {
  auto nearest = NearestExisting(flag, path);
  if (!nearest) return nearest.error();
  if (!S_ISDIR(nearest->second.st_mode))
    return InvalidArgument(Named(flag, path) + ": " + Excerpt(nearest->first, 200) + " is " +
                           FileKind(nearest->second.st_mode) + ", not a directory");
  return Ok();
}

}  // namespace

Status CheckDirectory(std::string_view flag, const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR)
      return InvalidArgument(Named(flag, path) + ": no such directory");
    return ErrnoError(Named(flag, path), errno);
  }
  if (!S_ISDIR(st.st_mode))
    return InvalidArgument(Named(flag, path) + ": " + FileKind(st.st_mode) + ", not a directory");
  return Ok();
}

Status CheckDirectoryToMake(std::string_view flag, const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode))
      return InvalidArgument(Named(flag, path) + ": " + FileKind(st.st_mode) + ", not a directory");
    return Ok();
  }
  if (errno != ENOENT && errno != ENOTDIR) return ErrnoError(Named(flag, path), errno);
  return CheckAncestor(flag, path);
}

Status CheckFileToWrite(std::string_view flag, const std::string& path) {
  struct stat st {};
  // The rename replaces whatever is there, a link included; only a directory stops it.
  if (::lstat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode))
      return InvalidArgument(Named(flag, path) + ": a directory, not a file");
    return Ok();
  }
  if (errno != ENOENT && errno != ENOTDIR) return ErrnoError(Named(flag, path), errno);
  return CheckAncestor(flag, path);
}

Status CheckNoSymlinks(std::string_view flag, const std::string& path) {
  size_t end = 0;
  while (end < path.size()) {
    end = path.find('/', end + 1);
    if (end == std::string::npos) end = path.size();
    const std::string prefix = path.substr(0, end);
    struct stat st {};
    if (::lstat(prefix.c_str(), &st) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) return Ok();  // the rest is made later
      return ErrnoError(Named(flag, path) + ": lstat " + Excerpt(prefix, 200), errno);
    }
    if (!S_ISLNK(st.st_mode)) continue;
    std::string message =
        Named(flag, path) + ": " + Excerpt(prefix, 200) +
        " is a symbolic link, and the service compares this path with the kernel's mount table";
    if (char* real = ::realpath(prefix.c_str(), nullptr)) {
      message += "; give the path without links, " + Excerpt(real + path.substr(end), 200);
      std::free(real);
    }
    return InvalidArgument(message);
  }
  return Ok();
}

Status CheckLibrary(std::string_view flag, const std::string& name_or_path) {
  if (name_or_path.find('/') == std::string::npos) return Ok();
  struct stat st {};
  if (::stat(name_or_path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR)
      return InvalidArgument(Named(flag, name_or_path) + ": no such file");
    return ErrnoError(Named(flag, name_or_path), errno);
  }
  if (!S_ISREG(st.st_mode))
    return InvalidArgument(Named(flag, name_or_path) + ": " + FileKind(st.st_mode) +
                           ", not a regular file (a library)");
  return Ok();
}

Status CheckProgram(std::string_view flag, const std::string& program) {
  if (program.empty()) return InvalidArgument(std::string(flag) + ": an empty program name");
  const std::string found = process::FindExecutable(program);
  if (found.empty()) {
    if (program.find('/') == std::string::npos) {
      const char* path = std::getenv("PATH");
      return InvalidArgument(Named(flag, program) + ": not found in PATH (" +
                             Excerpt(path ? path : "", 200) + ")");
    }
    struct stat st {};
    if (::stat(program.c_str(), &st) != 0)
      return InvalidArgument(Named(flag, program) + ": no such file");
    return InvalidArgument(Named(flag, program) + ": not executable");
  }
  struct stat st {};
  if (::stat(found.c_str(), &st) != 0) return ErrnoError(Named(flag, found), errno);
  if (!S_ISREG(st.st_mode))
    return InvalidArgument(Named(flag, found) + ": " + FileKind(st.st_mode) +
                           ", not a program file");
  return Ok();
}

}  // namespace tessera::serve

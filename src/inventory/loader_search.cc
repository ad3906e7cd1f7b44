// Where the host's dynamic loader finds shared libraries besides ld.so.cache, in its order:
// LD_LIBRARY_PATH, then (after the cache) its default directories. The directories ld.so.conf
// names come with them: ldconfig puts their libraries into the cache, but a cache built before
// such a directory was mounted (a read-only driver mount under /usr/local/nvidia, say) lacks
// them while the configuration already names them.
#include <fnmatch.h>

#include <algorithm>

#include "common/untrusted_text.h"
#include "inventory/parsers.h"
#include "inventory/readers.h"

namespace tessera::inventory {
namespace {

// glibc's built-in directories, searched after the cache: Debian's multiarch ones and the
// generic lib64/lib ones.
constexpr const char* kDefaultDirectories[] = {"/lib/x86_64-linux-gnu",
                                               "/usr/lib/x86_64-linux-gnu",
                                               "/lib/aarch64-linux-gnu",
                                               "/usr/lib/aarch64-linux-gnu",
                                               "/lib/i386-linux-gnu",
                                               "/usr/lib/i386-linux-gnu",
                                               "/lib64",
                                               "/usr/lib64",
                                               "/lib32",
                                               "/usr/lib32",
                                               "/lib",
                                               "/usr/lib"};
constexpr int kMaxIncludeDepth = 4;
constexpr size_t kMaxConfFiles = 64;
constexpr size_t kMaxConfBytes = 64 << 10;

struct ConfWalk {
  const HostRoot& host;
  std::vector<std::string>& directories;
  std::vector<std::string>& warnings;
  size_t files = 0;

  void Read(const std::string& path, int depth) {
    if (++files > kMaxConfFiles) {
      if (files == kMaxConfFiles + 1)
        warnings.push_back(path + ": more than " + std::to_string(kMaxConfFiles) +
                           " ld.so.conf files; the rest is not read");
      return;
    }
    auto text = host.ReadFile(path, kMaxConfBytes);
    if (!text) {
      // /etc/ld.so.conf may be missing altogether; an included file that vanished is no news.
      return;
    }
    auto conf = ParseLdSoConf(*text);
    if (!conf) {
      warnings.push_back(path + ": " + conf.error().message);
      return;
    }
    for (auto& dir : conf->directories)
      directories.push_back(std::move(dir));
    if (depth >= kMaxIncludeDepth) {
      if (!conf->includes.empty())
        warnings.push_back(path + ": includes nested deeper than " +
                           std::to_string(kMaxIncludeDepth) + " levels are not read");
      return;
    }
    for (const auto& pattern : conf->includes) {
      std::string full = pattern.front() == '/' ? pattern : JoinPath(DirName(path), pattern);
      full = NormalizePath(full);
      std::string dir = DirName(full), name = BaseName(full);
      if (dir.find_first_of("*?[") != std::string::npos) {
        warnings.push_back(path + ": include " + Excerpt(pattern) +
                           ": wildcards in directory names are not followed");
        continue;
      }
      if (name.find_first_of("*?[") == std::string::npos) {
        Read(full, depth + 1);
        continue;
      }
      auto names = host.ListDirectory(dir);
      if (!names) continue;
      for (const auto& candidate : *names)  // sorted, as glob(3) returns them
        if (::fnmatch(name.c_str(), candidate.c_str(), FNM_PERIOD) == 0)
          Read(JoinPath(dir, candidate), depth + 1);
    }
  }
};

}  // namespace

std::vector<std::string> LoaderDirectories(const HostRoot& host,
                                           const std::vector<std::string>& library_path,
                                           std::vector<std::string>& warnings) {
  std::vector<std::string> directories = library_path;
  ConfWalk walk{host, directories, warnings};
  walk.Read("/etc/ld.so.conf", 0);
  for (const char* dir : kDefaultDirectories)
    directories.emplace_back(dir);
  std::vector<std::string> unique;
  for (auto& dir : directories) {
    dir = NormalizePath(dir);
    if (std::find(unique.begin(), unique.end(), dir) == unique.end())
      unique.push_back(std::move(dir));
  }
  return unique;
}

bool IsLoaderDefaultDirectory(const std::string& dir) {
  for (const char* known : kDefaultDirectories)
    if (dir == known) return true;
  return false;
}

}  // namespace tessera::inventory

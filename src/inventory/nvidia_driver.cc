// The NVIDIA driver's version and the user-space files a container needs from the host:
// libraries found through ld.so.cache, binaries, GSP firmware and IPC sockets.
#include <algorithm>
#include <set>

#include "inventory/parsers.h"
#include "inventory/readers.h"

namespace tessera::inventory {
namespace {

constexpr const char* kBinaries[] = {"nvidia-smi", "nvidia-debugdump", "nvidia-persistenced",
                                     "nvidia-cuda-mps-control", "nvidia-cuda-mps-server"};
constexpr const char* kBinaryDirs[] = {"/usr/bin", "/usr/sbin", "/usr/local/bin", "/bin", "/sbin"};
constexpr const char* kFirmwareDirs[] = {"/lib/firmware/nvidia", "/usr/lib/firmware/nvidia"};
constexpr const char* kIpcSockets[] = {"/run/nvidia-persistenced/socket",
                                       "/run/nvidia-fabricmanager/socket"};

bool EndsWith(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::optional<std::string> ReadVersion(const HostRoot& host, std::vector<std::string>& warnings) {
  for (const char* path : {"/proc/driver/nvidia/version", "/sys/module/nvidia/version"}) {
    auto text = host.ReadFile(path);
    if (!text) continue;
    auto version = ParseNvidiaDriverVersion(*text);
    if (version) return *version;
    warnings.push_back(std::string(path) + ": " + version.error().message);
  }
  return std::nullopt;
}

// Every lib*.so.<version> the loader can reach: first through the cache, which maps SONAMEs to
// the SONAME links (libcuda.so.1 → libcuda.so.580.65.06; both the file and the link are
// recorded), then in the directories it searches besides the cache.
class LibraryFinder {
 public:
  LibraryFinder(const HostRoot& host, const std::string& version,
                std::vector<std::string>& warnings)
      : host_(host), suffix_(".so." + version), warnings_(warnings) {}

  void FromCache() {
    auto bytes = host_.ReadFile("/etc/ld.so.cache", 64 << 20);
    if (!bytes) {
      warnings_.push_back(bytes.error().message + " (driver libraries not listed)");
      return;
    }
    auto entries = ParseLdCache(*bytes);
    if (!entries) {
      warnings_.push_back("/etc/ld.so.cache: " + entries.error().message);
      return;
    }
    for (const LdCacheEntry& entry : *entries) {
      if (entry.path.empty() || entry.path.front() != '/') continue;
      // Cheap filter before touching the file system: a driver library's name starts with lib
      // and its cache entry either is the versioned file or a SONAME link to it.
      std::string base = BaseName(entry.path);
      if (base.rfind("lib", 0) != 0) continue;
      bool direct = EndsWith(base, suffix_);
      if (!direct && !host_.IsSymlink(entry.path)) continue;
      std::string real = entry.path;
      if (!direct) {
        auto canonical = host_.Canonical(entry.path);
        if (!canonical) continue;
        real = *canonical;
        if (!EndsWith(BaseName(real), suffix_)) continue;
      }
      DriverLibrary library;
      library.path = real;
      library.arch = entry.arch();
      if (entry.path != real) {
        library.soname = entry.name;
        library.soname_link = entry.path;
      }
      Add(std::move(library));
    }
  }

  // Versioned files in `dir` the cache did not list, with the SONAME link beside each (a link
  // named lib*.so.* resolving to it; the development link lib*.so is not one).
  void FromDirectory(const std::string& dir) {
    auto names = host_.ListDirectory(dir);
    if (!names) return;
    std::vector<DriverLibrary> found;
    for (const auto& name : *names) {
      if (name.rfind("lib", 0) != 0 || !EndsWith(name, suffix_)) continue;
      std::string path = JoinPath(dir, name);
      auto real = host_.Canonical(path);
      if (!real || !EndsWith(BaseName(*real), suffix_) || Known(*real)) continue;
      auto head = host_.ReadHead(*real, 20);
      auto arch = head ? ElfLibraryArch(*head) : std::nullopt;
      if (!arch) continue;  // not a shared object the loader could use
      DriverLibrary library;
      library.path = *real;
      library.arch = *arch;
      found.push_back(std::move(library));
    }
    // SONAME links: libcuda.so.1 beside libcuda.so.580.65.06 ("libcuda.so." starts both).
    for (auto& library : found) {
      const std::string file = BaseName(library.path);
      const std::string stem = file.substr(0, file.size() - suffix_.size() + 4);
      auto first = std::lower_bound(names->begin(), names->end(), stem);
      for (auto it = first; it != names->end() && it->rfind(stem, 0) == 0; ++it) {
        std::string link = JoinPath(dir, *it);
        if (*it == file || !host_.IsSymlink(link)) continue;
        auto real = host_.Canonical(link);
        if (real && *real == library.path) {
          library.soname = *it;
          library.soname_link = link;
          break;
        }
      }
    }
    for (auto& library : found)
      Add(std::move(library));
  }

  std::vector<DriverLibrary> Take() {
    std::sort(libraries_.begin(), libraries_.end(),
              [](const DriverLibrary& a, const DriverLibrary& b) { return a.path < b.path; });
    return std::move(libraries_);
  }

 private:
  bool Known(const std::string& real) const {
    return std::any_of(libraries_.begin(), libraries_.end(),
                       [&](const DriverLibrary& library) { return library.path == real; });
  }
  void Add(DriverLibrary library) {
    if (seen_.insert(library.path + "|" + library.arch).second)
      libraries_.push_back(std::move(library));
  }

  const HostRoot& host_;
  const std::string suffix_;
  std::vector<std::string>& warnings_;
  std::vector<DriverLibrary> libraries_;
  std::set<std::string> seen_;
};

}  // namespace

std::optional<NvidiaDriver> ReadNvidiaDriver(const HostRoot& host, const DriverSearch& search,
                                             std::vector<std::string>& warnings) {
  auto version = ReadVersion(host, warnings);
  if (!version) return std::nullopt;
  NvidiaDriver driver;
  driver.version = *version;
  LibraryFinder libraries(host, driver.version, warnings);
  libraries.FromCache();
  for (const auto& dir : LoaderDirectories(host, search.library_path, warnings))
    libraries.FromDirectory(dir);
  driver.libraries = libraries.Take();

  // As a shell finds them: PATH first, then the usual directories.
  std::vector<std::string> program_dirs = search.program_path;
  program_dirs.insert(program_dirs.end(), std::begin(kBinaryDirs), std::end(kBinaryDirs));
  for (const char* name : kBinaries) {
    for (const auto& dir : program_dirs) {
      std::string path = JoinPath(dir, name);
      if (host.Exists(path)) {
        driver.binaries.push_back(path);
        break;
      }
    }
  }

  // /lib is usually a link to /usr/lib: list each real directory once.
  std::set<std::string> firmware_dirs;
  for (const char* dir : kFirmwareDirs) {
    std::string path = std::string(dir) + "/" + driver.version;
    auto canonical = host.Canonical(path);
    if (!canonical || !firmware_dirs.insert(*canonical).second) continue;
    auto names = host.ListDirectory(path);
    if (!names) continue;
    for (const auto& name : *names) {
      if (name.rfind("gsp", 0) == 0 && EndsWith(name, ".bin")) {
        driver.firmware.push_back(path + "/" + name);
      }
    }
  }

  for (const char* socket : kIpcSockets) {
    if (host.Exists(socket)) driver.ipc_sockets.push_back(socket);
  }
  return driver;
}

}  // namespace tessera::inventory

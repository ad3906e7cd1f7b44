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

// Every lib*.so.<version> reachable through the cache. The cache maps SONAMEs to the SONAME
// links (libcuda.so.1 → libcuda.so.580.65.06); both the file and the link are recorded.
std::vector<DriverLibrary> FindLibraries(const HostRoot& host, const std::string& version,
                                         std::vector<std::string>& warnings) {
  std::vector<DriverLibrary> libraries;
  auto bytes = host.ReadFile("/etc/ld.so.cache", 64 << 20);
  if (!bytes) {
    warnings.push_back(bytes.error().message + " (driver libraries not listed)");
    return libraries;
  }
  auto entries = ParseLdCache(*bytes);
  if (!entries) {
    warnings.push_back("/etc/ld.so.cache: " + entries.error().message);
    return libraries;
  }
  const std::string suffix = ".so." + version;
  std::set<std::string> seen;
  for (const LdCacheEntry& entry : *entries) {
    if (entry.path.empty() || entry.path.front() != '/') continue;
    // Cheap filter before touching the file system: a driver library's name starts with lib
    // and its cache entry either is the versioned file or a SONAME link to it.
    std::string base = BaseName(entry.path);
    if (base.rfind("lib", 0) != 0) continue;
    bool direct = EndsWith(base, suffix);
    if (!direct && !host.IsSymlink(entry.path)) continue;
    std::string real = entry.path;
    if (!direct) {
      auto canonical = host.Canonical(entry.path);
      if (!canonical) continue;
      real = *canonical;
      if (!EndsWith(BaseName(real), suffix)) continue;
    }
    std::string key = real + "|" + entry.arch();
    if (!seen.insert(key).second) continue;
    DriverLibrary library;
    library.path = real;
    library.arch = entry.arch();
    if (entry.path != real) {
      library.soname = entry.name;
      library.soname_link = entry.path;
    }
    libraries.push_back(std::move(library));
  }
  std::sort(libraries.begin(), libraries.end(),
            [](const DriverLibrary& a, const DriverLibrary& b) { return a.path < b.path; });
  return libraries;
}

}  // namespace

std::optional<NvidiaDriver> ReadNvidiaDriver(const HostRoot& host,
                                             std::vector<std::string>& warnings) {
  auto version = ReadVersion(host, warnings);
  if (!version) return std::nullopt;
  NvidiaDriver driver;
  driver.version = *version;
  driver.libraries = FindLibraries(host, driver.version, warnings);

  for (const char* name : kBinaries) {
    for (const char* dir : kBinaryDirs) {
      std::string path = std::string(dir) + "/" + name;
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

// The sysfs view of a GPU no driver holds (VFIO, Kata): whether its directory is there, whether
// its config space answers, and its PCIe AER fatal counter.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "common/bounded_file.h"
#include "health/watch/signals.h"

namespace tessera::health {

namespace {

// The config space's header: a device that fell off the bus answers every read with all ones.
// sysfs's config file is a regular file as big as the config space, so it is read directly,
// bounded to the header.
bool ConfigAllOnes(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return false;
  struct stat st {};
  unsigned char header[64];
  ssize_t got = -1;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    do {
      got = ::read(fd, header, sizeof header);
    } while (got < 0 && errno == EINTR);
  }
  ::close(fd);
  if (got < 4) return false;  // unreadable, or too short to hold the vendor and device IDs
  for (ssize_t i = 0; i < got; ++i)
    if (header[i] != 0xFF) return false;
  return true;
}

constexpr size_t kMaxAerFileBytes = 8192;  // sysfs pages are 4096 bytes

}  // namespace

SysfsState ReadSysfs(const std::string& root, const std::string& pci) {
  std::string base = root;
  if (!base.empty() && base.back() == '/') base.pop_back();
  const std::string dir = base + "/sys/bus/pci/devices/" + pci;
  SysfsState state;
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    state.gone = true;
    return state;
  }
  state.config_ones = ConfigAllOnes(dir + "/config");
  if (auto text = ReadBoundedFile(dir + "/aer_dev_fatal", kMaxAerFileBytes))
    state.aer_fatal = AerCount(*text, "TOTAL_ERR_FATAL");
  return state;
}

}  // namespace tessera::health

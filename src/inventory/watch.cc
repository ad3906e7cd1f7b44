#include "inventory/watch.h"

#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "inventory/host_root.h"

namespace tessera::inventory {
namespace {

constexpr uint32_t kDirEvents =
    IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM | IN_CLOSE_WRITE | IN_ATTRIB;

// Host directories whose entries make up the inventory, and the entry names that matter in
// each (empty = all).
}  // namespace

struct ChangeWatcher::WatchedDir {
  const char* path;
  std::vector<std::string> prefixes;
};

namespace {

const ChangeWatcher::WatchedDir kWatchedDirs[] = {
    {"/etc", {"ld.so.cache"}},  // ldconfig writes ld.so.cache~ and renames it over
    {"/dev", {"nvidia", "kfd", "iommu", "dri", "vfio"}},
    {"/dev/vfio", {}},
    {"/dev/vfio/devices", {}},
    {"/dev/dri", {}},
    {"/sys/bus/pci/devices", {}},
    {"/lib/firmware/nvidia", {}},
    {"/run/nvidia-persistenced", {}},
    {"/run/nvidia-fabricmanager", {}},
};

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

ChangeWatcher::ChangeWatcher(std::string root, int poll_interval_ms, int inotify_fd)
    : root_(std::move(root)), poll_interval_ms_(poll_interval_ms), inotify_fd_(inotify_fd) {}

ChangeWatcher::~ChangeWatcher() {
  if (inotify_fd_ >= 0) ::close(inotify_fd_);
}

Result<std::unique_ptr<ChangeWatcher>> ChangeWatcher::Start(const std::string& root,
                                                            int poll_interval_ms) {
  int fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd < 0) return ErrnoError("inotify_init1", errno);
  std::unique_ptr<ChangeWatcher> watcher(new ChangeWatcher(root, poll_interval_ms, fd));
  HostRoot host(root);
  for (const auto& dir : kWatchedDirs) {
    // A directory that does not exist yet (no driver loaded) is covered by polling its parent
    // through the fingerprint; inotify on it starts with the next watcher.
    int wd = ::inotify_add_watch(fd, host.Resolve(dir.path).c_str(), kDirEvents);
    if (wd >= 0) watcher->watches_[wd] = &dir;
  }
  watcher->fingerprint_ = watcher->Fingerprint();
  return watcher;
}

std::string ChangeWatcher::Fingerprint() const {
  HostRoot host(root_);
  std::string out;
  for (const char* file : {"/proc/driver/nvidia/version", "/sys/module/nvidia/version"}) {
    auto text = host.ReadFile(file, 64 * 1024);
    out += std::string(file) + "=" + (text ? *text : "-") + "\n";
  }
  struct stat st;
  if (::stat(host.Resolve("/etc/ld.so.cache").c_str(), &st) == 0) {
    out += "ld.so.cache=" + std::to_string(st.st_ino) + ":" + std::to_string(st.st_size) + ":" +
           std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + "\n";
  }
  if (auto devices = host.ListDirectory("/sys/bus/pci/devices")) {
    for (const auto& device : *devices) {
      auto driver = host.ReadLink("/sys/bus/pci/devices/" + device + "/driver");
      out += device + "=" + (driver ? BaseName(*driver) : "") + "\n";
    }
  }
  for (const char* dir : {"/dev", "/dev/vfio", "/dev/dri"}) {
    if (auto names = host.ListDirectory(dir)) {
      out += std::string(dir) + ":";
      for (const auto& name : *names)
        out += name + ",";
      out += "\n";
    }
  }
  return out;
}

bool ChangeWatcher::DrainEvents() {
  bool relevant = false;
  alignas(struct inotify_event) char buffer[16384];
  for (;;) {
    ssize_t n = ::read(inotify_fd_, buffer, sizeof buffer);
    if (n <= 0) break;
    for (ssize_t offset = 0; offset < n;) {
      auto* event = reinterpret_cast<struct inotify_event*>(buffer + offset);
      offset += static_cast<ssize_t>(sizeof(struct inotify_event) + event->len);
      if (event->mask & IN_Q_OVERFLOW) {
        relevant = true;
        continue;
      }
      std::string name = event->len ? event->name : "";
      auto it = watches_.find(event->wd);
      if (it == watches_.end() || it->second->prefixes.empty() || name.empty()) {
        relevant = true;
        continue;
      }
      // /etc and /dev carry unrelated traffic (mtab, ttys); only the named entries count.
      for (const auto& prefix : it->second->prefixes) {
        if (name.rfind(prefix, 0) == 0) relevant = true;
      }
    }
  }
  return relevant;
}

Result<bool> ChangeWatcher::Wait(int timeout_ms, int stop_fd) {
  int64_t deadline = timeout_ms < 0 ? -1 : NowMs() + timeout_ms;
  for (;;) {
    int wait = poll_interval_ms_;
    if (deadline >= 0) {
      int64_t left = deadline - NowMs();
      if (left <= 0) return false;
      if (left < wait) wait = static_cast<int>(left);
    }
    struct pollfd fds[2] = {{inotify_fd_, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    int n = ::poll(fds, stop_fd >= 0 ? 2 : 1, wait);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("poll", errno);
    if (stop_fd >= 0 && (fds[1].revents & POLLIN)) return false;
    bool changed = false;
    if (fds[0].revents & POLLIN) changed = DrainEvents();
    if (!changed) {
      std::string now = Fingerprint();
      changed = now != fingerprint_;
    }
    if (!changed) continue;
    // Fold the rest of a burst (ldconfig, driver install) into this change.
    for (;;) {
      struct pollfd more = {inotify_fd_, POLLIN, 0};
      if (::poll(&more, 1, 100) <= 0) break;
      DrainEvents();
    }
    fingerprint_ = Fingerprint();
    return true;
  }
}

}  // namespace tessera::inventory

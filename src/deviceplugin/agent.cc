// The agent's event loop: signals (signalfd), the socket dir, device dirs and the lease dir
// (inotify), and a poll tick for what inotify cannot see (sysfs changes made by the kernel).
#include "deviceplugin/agent.h"

#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <set>

#include "common/bounded_file.h"
#include "deviceplugin/fault_keeper.h"
#include "deviceplugin/mps_keeper.h"
#include "deviceplugin/server.h"
#include "windows/snapshot.h"

namespace tessera::deviceplugin {
namespace {

using Clock = std::chrono::steady_clock;

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::string Parent(const std::string& path) {
  return std::filesystem::path(path).parent_path().string();
}

std::string BaseName(const std::string& path) {
  return std::filesystem::path(path).filename().string();
}

// What identifies one version of the lease file: writers replace it by rename, so the inode
// changes on every write.
struct FileStamp {
  bool exists = false;
  ino_t inode = 0;
  int64_t mtime_ns = 0;
  off_t size = 0;
  friend bool operator==(const FileStamp&, const FileStamp&) = default;
};

FileStamp Stamp(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return {};
  return {true, st.st_ino, int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec,
          st.st_size};
}

bool UsesCdi(const Config& config) {
  for (auto s : config.device_list_strategy) {
    if (s == ListStrategy::kCdiCri || s == ListStrategy::kCdiAnnotations) return true;
  }
  return false;
}

class Agent {
 public:
  explicit Agent(int signal_fd) : signal_fd_(signal_fd) {}
  ~Agent() { Teardown(); }

  Status Build(const Config& config);
  void Teardown();
  // Returns false when the agent should exit.
  bool RunOnce();

 private:
  void ReadEvents();
  void Reconcile(bool kubelet_started);
  void CheckLeases(bool force);
  void ProbeHealth();
  void AddWatches();
  std::string SocketPath(size_t i) const {
    return config_.socket_dir + "/" + manager_->resources()[i].socket_name;
  }
  std::string KubeletSocket() const { return config_.socket_dir + "/" + kKubeletSocket; }

  int signal_fd_;
  Config config_;
  std::shared_ptr<ResourceManager> manager_;
  std::vector<std::unique_ptr<ResourceServer>> servers_;  // per resource
  std::vector<bool> registered_;                          // per resource
  Clock::time_point last_register_attempt_{};
  std::chrono::milliseconds register_backoff_{50};
  int inotify_fd_ = -1;
  int socket_dir_wd_ = -1;
  int lease_dir_wd_ = -1;
  std::set<int> device_wds_;
  bool kubelet_event_ = false;
  bool lease_event_ = false;
  FileStamp lease_stamp_;
  std::unique_ptr<FaultKeeper> faults_;  // GPU faults: classification and recovery
  std::unique_ptr<MpsKeeper> mps_;       // sharing.mps: the GPUs' daemons
};

// Linux nodes read the PCI inventory under the root; Windows nodes a DirectX host snapshot.
Result<std::unique_ptr<ResourceManager>> CreateManager(const Config& config) {
  if (!config.windows_snapshot.empty()) {
    auto text = ReadBoundedFile(config.windows_snapshot, kMaxConfigFileBytes);
    if (!text) return text.error().WithContext("windows snapshot");
    auto snapshot = windows::ParseSnapshot(*text);
    if (!snapshot) return snapshot.error().WithContext(config.windows_snapshot);
    return ResourceManager::CreateForWindows(*snapshot, config);
  }
  inventory::ReadOptions read;
  read.root = config.root;
  read.nvml_library = config.health.nvml_library;  // MIG devices' profiles and UUIDs
  auto inventory = inventory::ReadInventory(read);
  if (!inventory) return inventory.error().WithContext("inventory of " + config.root);
  auto table = LoadPartitionTable(config.topology);
  if (!table) return table.error();
  return ResourceManager::Create(*inventory, config, *table);
}

Status Agent::Build(const Config& config) {
  config_ = config;
  auto manager = CreateManager(config);
  if (!manager) return manager.error();
  manager_ = std::shared_ptr<ResourceManager>(std::move(*manager));
  for (const auto& warning : manager_->warnings())
    spdlog::warn("{}", warning);
  for (const auto& resource : manager_->resources()) {
    spdlog::info(
        "resource {}: {} devices{}", resource.name, resource.ids.size(),
        resource.replicas > 1 ? " (" + std::to_string(resource.replicas) + " replicas each)" : "");
  }

  if (config.write_cdi_specs && UsesCdi(config)) {
    for (const auto& spec : manager_->cdi_specs()) {
      std::string path = config.cdi_dir + "/" + cdi::SpecFileName(spec, cdi::Format::kJson);
      auto written = cdi::WriteSpecFile(path, cdi::Serialize(spec, cdi::Format::kJson));
      if (!written) return written.error().WithContext("CDI spec " + path);
      if (*written) spdlog::info("wrote CDI spec {}", path);
    }
  }

  inotify_fd_ = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (inotify_fd_ < 0) return ErrnoError("inotify_init1", errno);
  std::error_code ignored;
  std::filesystem::create_directories(config.socket_dir, ignored);
  AddWatches();
  CheckLeases(true);
  if (config.health.enabled) ProbeHealth();

  auto faults = FaultKeeper::Start(manager_, config);
  if (!faults) return faults.error();
  faults_ = std::move(*faults);
  // MPS daemons come up on their own thread; their GPUs stay unhealthy, and Allocate waits,
  // until each one's marker holds its config's hash.
  mps_ = MpsKeeper::Start(manager_);
  registered_.assign(manager_->resources().size(), false);
  servers_.clear();
  servers_.resize(manager_->resources().size());
  kubelet_event_ = false;  // Reconcile below handles the kubelet that is already there
  Reconcile(false);

  return Ok();
}

void Agent::Teardown() {
  faults_.reset();
  mps_.reset();  // the daemons stay up for the Pods that use them
  if (manager_) manager_->Shutdown();
  for (auto& server : servers_) {
    if (server) server->Stop();
  }
  servers_.clear();
  if (inotify_fd_ >= 0) ::close(inotify_fd_);
  inotify_fd_ = socket_dir_wd_ = lease_dir_wd_ = -1;
  device_wds_.clear();
  manager_.reset();
}

void Agent::AddWatches() {
  if (socket_dir_wd_ < 0 && Exists(config_.socket_dir)) {
    socket_dir_wd_ = ::inotify_add_watch(inotify_fd_, config_.socket_dir.c_str(),
                                         IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM |
                                             IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR);
    if (socket_dir_wd_ >= 0) kubelet_event_ = true;  // the dir came (back): check kubelet.sock
  }
  std::string lease_dir = Parent(config_.lease_file);
  if (lease_dir_wd_ < 0 && Exists(lease_dir)) {
    lease_dir_wd_ = ::inotify_add_watch(
        inotify_fd_, lease_dir.c_str(),
        IN_CLOSE_WRITE | IN_MOVED_TO | IN_DELETE | IN_CREATE | IN_DELETE_SELF | IN_ONLYDIR);
  }
  if (device_wds_.empty() && config_.health.enabled) {
    // Device nodes live in /dev and below; their removal is seen at once. sysfs entries are
    // polled on the tick.
    std::set<std::string> dirs;
    for (const auto& device : manager_->devices()) {
      for (const auto& path : device.watch_paths) {
        if (path.find("/sys/") == std::string::npos) dirs.insert(Parent(path));
      }
    }
    for (const auto& dir : dirs) {
      int wd = ::inotify_add_watch(inotify_fd_, dir.c_str(),
                                   IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM | IN_ATTRIB);
      if (wd >= 0) device_wds_.insert(wd);
    }
  }
}

void Agent::ReadEvents() {
  alignas(struct inotify_event) char buffer[8192];
  std::string lease_name = BaseName(config_.lease_file);
  for (;;) {
    ssize_t n = ::read(inotify_fd_, buffer, sizeof buffer);
    if (n <= 0) return;
    for (char* p = buffer; p < buffer + n;) {
      auto* event = reinterpret_cast<struct inotify_event*>(p);
      std::string name = event->len ? event->name : "";
      if (event->wd == socket_dir_wd_) {
        if (event->mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF)) {
          ::inotify_rm_watch(inotify_fd_, socket_dir_wd_);
          socket_dir_wd_ = -1;
        } else if (name == kKubeletSocket && (event->mask & (IN_CREATE | IN_MOVED_TO))) {
          kubelet_event_ = true;
        }
      } else if (event->wd == lease_dir_wd_) {
        if (event->mask & (IN_IGNORED | IN_DELETE_SELF)) lease_dir_wd_ = -1;
        if (name == lease_name) lease_event_ = true;
      }  // device dir events only wake the loop: every round probes presence
      p += sizeof(struct inotify_event) + event->len;
    }
  }
}

void Agent::Reconcile(bool kubelet_started) {
  const auto& resources = manager_->resources();
  bool kubelet_up = Exists(KubeletSocket());
  for (size_t i = 0; i < resources.size(); ++i) {
    // Kubelet deletes every file in the socket dir when it starts; a missing socket is served
    // again. A new kubelet gets fresh servers (its predecessor's streams are dead).
    bool missing = !servers_[i] || !Exists(servers_[i]->socket_path());
    if (missing || (kubelet_started && kubelet_up)) {
      if (servers_[i]) servers_[i]->Stop();
      servers_[i].reset();
      std::error_code ignored;
      std::filesystem::create_directories(config_.socket_dir, ignored);
      auto server =
          ResourceServer::Start(manager_, &resources[i], SocketPath(i), config_.grpc_threads);
      if (!server) {
        spdlog::error("{}", server.error().message);
        continue;
      }
      servers_[i] = std::move(*server);
      registered_[i] = false;
      spdlog::info("serving {} on {}", resources[i].name, SocketPath(i));
    }
  }
  if (!kubelet_up) return;
  // kubelet.sock appears at bind(), a moment before kubelet listens: retry quickly at first
  // (50 ms, doubling up to 1 s) so a restart is answered well within a second.
  if (kubelet_started) register_backoff_ = std::chrono::milliseconds(50);
  bool retry_due = Clock::now() - last_register_attempt_ >= register_backoff_;
  for (size_t i = 0; i < resources.size(); ++i) {
    if (registered_[i] || !servers_[i]) continue;
    if (!kubelet_started && !retry_due) continue;
    last_register_attempt_ = Clock::now();
    Status s = RegisterWithKubelet(KubeletSocket(), resources[i].socket_name, resources[i].name,
                                   /*preferred_allocation=*/true);
    if (s) {
      registered_[i] = true;
      register_backoff_ = std::chrono::milliseconds(50);
      spdlog::info("registered {} with kubelet", resources[i].name);
    } else {
      register_backoff_ = std::min(register_backoff_ * 2, std::chrono::milliseconds(1000));
      spdlog::warn("{}", s.error().message);
    }
  }
}

void Agent::CheckLeases(bool force) {
  FileStamp stamp = Stamp(config_.lease_file);
  if (!force && stamp == lease_stamp_) return;
  lease_stamp_ = stamp;
  auto leases = ReadLeaseFile(config_.lease_file);
  if (!leases) {
    // Keep the last good leases: a bad file must not hand quarantined GPUs out again.
    spdlog::error("lease file ignored: {}", leases.error().message);
    return;
  }
  if (manager_->SetLeases(*leases)) spdlog::info("leases changed ({})", config_.lease_file);
}

void Agent::ProbeHealth() {
  auto presence = ProbePresence(manager_->devices());
  if (manager_->SetPresence(presence)) {
    for (const auto& [pci, present] : presence) {
      spdlog::info("{}: {}", pci, present ? "present" : "gone");
    }
  }
}

bool Agent::RunOnce() {
  struct pollfd fds[2] = {{signal_fd_, POLLIN, 0}, {inotify_fd_, POLLIN, 0}};
  int timeout = config_.health.enabled ? config_.health.poll_interval_ms : 1000;
  if (std::find(registered_.begin(), registered_.end(), false) != registered_.end()) {
    timeout = std::min<int>(timeout, static_cast<int>(register_backoff_.count()));
  }
  int ready = ::poll(fds, 2, timeout);
  if (ready < 0 && errno != EINTR) return false;
  if (fds[0].revents & POLLIN) return true;  // RunAgent reads and handles the signal
  if (fds[1].revents & POLLIN) ReadEvents();
  AddWatches();
  bool kubelet_started = kubelet_event_;
  kubelet_event_ = false;
  Reconcile(kubelet_started);
  CheckLeases(lease_event_);
  lease_event_ = false;
  if (config_.health.enabled) ProbeHealth();
  return true;
}

}  // namespace

Status RunAgent(const ConfigLoader& load_config) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGHUP);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  if (::pthread_sigmask(SIG_BLOCK, &signals, nullptr) != 0) {
    return ErrnoError("pthread_sigmask", errno);
  }
  int signal_fd = ::signalfd(-1, &signals, SFD_CLOEXEC | SFD_NONBLOCK);
  if (signal_fd < 0) return ErrnoError("signalfd", errno);

  auto config = load_config();
  if (!config) {
    ::close(signal_fd);
    return config.error();
  }
  Config current = *config;
  auto agent = std::make_unique<Agent>(signal_fd);
  if (Status s = agent->Build(current); !s) {
    agent.reset();
    ::close(signal_fd);
    return s;
  }
  for (;;) {
    // SIGHUP arrives as a readable signalfd: peek with a zero-timeout poll before each round.
    struct pollfd pfd = {signal_fd, POLLIN, 0};
    if (::poll(&pfd, 1, 0) == 1) {
      struct signalfd_siginfo info;
      if (::read(signal_fd, &info, sizeof info) == sizeof info) {
        if (info.ssi_signo != SIGHUP) break;
        auto reloaded = load_config();
        if (!reloaded) {
          spdlog::error("SIGHUP: config not reloaded: {}", reloaded.error().message);
        } else {
          spdlog::info("SIGHUP: reloading config");
          agent = std::make_unique<Agent>(signal_fd);
          if (Status s = agent->Build(*reloaded); !s) {
            spdlog::error("reload failed ({}); keeping the previous config", s.error().message);
            agent = std::make_unique<Agent>(signal_fd);
            if (Status again = agent->Build(current); !again) {
              ::close(signal_fd);
              return again;
            }
          } else {
            current = *reloaded;
          }
        }
      }
    }
    if (!agent->RunOnce()) break;
  }
  agent.reset();
  ::close(signal_fd);
  return Ok();
}

}  // namespace tessera::deviceplugin

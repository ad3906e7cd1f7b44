// One GPU's MPS control daemon: start in the contract's order, take over after a restart of
// tessera, apply a changed config, check, restart, terminate a client, tear down.
//
// Not thread-safe: the owner (serve's shared-GPU keeper, the device plugin's agent) calls one
// daemon from one thread at a time.
#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <filesystem>
#include <thread>

#include "common/atomic_file.h"
#include "common/untrusted_text.h"
#include "mps/mps.h"
#include "nvml/nvml.h"
#include "process/process.h"

namespace tessera::mps {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kPidFile[] = "nvidia-cuda-mps-control.pid";
constexpr char kControlSocket[] = "control";

// The last `max_bytes` of a file (NotFound when it does not exist): logs grow without bound, so
// only their tail is ever read.
Result<std::string> ReadTail(const std::string& path, size_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open " + path, errno);
  struct stat st {};
  if (::fstat(fd, &st) == 0 && st.st_size > static_cast<off_t>(max_bytes))
    ::lseek(fd, st.st_size - static_cast<off_t>(max_bytes), SEEK_SET);
  std::string out;
  char buffer[16384];
  while (out.size() < max_bytes) {
    ssize_t n = ::read(fd, buffer, std::min(sizeof buffer, max_bytes - out.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

bool Exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

// Whether `pid` runs: a zombie has ended, whoever is late to reap it (a daemon is reparented to
// init, or to whatever a container runs as PID 1).
bool Alive(pid_t pid) {
  if (pid <= 0 || (::kill(pid, 0) != 0 && errno != EPERM)) return false;
  auto stat = ReadTail("/proc/" + std::to_string(pid) + "/stat", 512);
  if (!stat) return false;
  // "pid (comm) S ...": the state follows the last ')' (comm may hold any bytes).
  const size_t close = stat->rfind(')');
  if (close == std::string::npos || close + 2 >= stat->size()) return true;
  const char state = (*stat)[close + 2];
  return state != 'Z' && state != 'X';
}

std::optional<uint32_t> ParsePid(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' '))
    text.remove_suffix(1);
  uint32_t pid = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), pid);
  if (error != std::errc() || end != text.data() + text.size() || pid == 0) return std::nullopt;
  return pid;
}

// Every whole number on its own line of a control answer ("get_server_list").
std::vector<uint32_t> PidsOf(std::string_view output) {
  std::vector<uint32_t> pids;
  size_t start = 0;
  while (start < output.size() && pids.size() < 256) {
    size_t end = output.find('\n', start);
    if (end == std::string_view::npos) end = output.size();
    if (auto pid = ParsePid(output.substr(start, end - start))) pids.push_back(*pid);
    start = end + 1;
  }
  return pids;
}

// Whether `pid` runs a program whose name starts with `name` (a PID from a file may have been
// reused by now).
bool Runs(pid_t pid, const std::string& name) {
  auto comm = ReadTail("/proc/" + std::to_string(pid) + "/comm", 64);
  if (!comm) return false;
  std::string text = *comm;
  while (!text.empty() && text.back() == '\n')
    text.pop_back();
  // comm holds at most 15 characters of the name.
  return !text.empty() && name.compare(0, text.size(), text) == 0;
}

std::string BaseName(const std::string& path) {
  return std::filesystem::path(path).filename().string();
}

void KillAndWait(pid_t pid, std::chrono::milliseconds patience) {
  ::kill(pid, SIGKILL);
  const auto deadline = Clock::now() + patience;
  while (Alive(pid) && Clock::now() < deadline) {
    // Our own child is reaped here; another's is reaped by its parent (init).
    ::waitpid(pid, nullptr, WNOHANG);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// control.log and server.log (their tails) read out.
LogFacts ReadLogsOf(const Paths& paths) {
  std::string text;
  for (const char* name : {"control.log", "server.log"}) {
    auto tail = ReadTail(paths.log + "/" + name, kLogTailBytes);
    if (!tail) continue;
    // A tail cut mid-line starts with a fragment; the parser counts it as malformed.
    text += *tail;
    if (!text.empty() && text.back() != '\n') text += '\n';
  }
  return ReadLogFacts(text);
}

}  // namespace

std::string ReadReadyMarker(const Paths& paths) {
  auto text = ReadTail(paths.ready, 256);
  if (!text) return "";
  std::string hash = *text;
  while (!hash.empty() && (hash.back() == '\n' || hash.back() == ' '))
    hash.pop_back();
  return hash;
}

Daemon::Daemon(const Options& options, const nvml::Library& nvml, DaemonConfig config, Paths paths)
    : options_(options),
      nvml_(nvml),
      config_(std::move(config)),
      hash_(ConfigHash(config_)),
      paths_(std::move(paths)) {}

Result<std::unique_ptr<Daemon>> Daemon::Open(const Options& options, const nvml::Library& nvml,
                                             const DaemonConfig& config) {
  if (auto status = CheckConfig(config); !status) return status.error();
  auto paths = PathsFor(options.root, config.gpu_uuid);
  if (!paths) return paths.error();
  Options resolved = options;
  resolved.control_binary = process::FindExecutable(options.control_binary);
  if (resolved.control_binary.empty())
    return Unavailable(options.control_binary + " not found (MPS needs NVIDIA's control daemon)");
  std::unique_ptr<Daemon> daemon(new Daemon(resolved, nvml, config, *paths));

  // A daemon of an earlier run that still answers keeps its clients: take it over.
  if (Exists(paths->pipe + "/" + kControlSocket) && IsMountPoint(paths->shm) &&
      daemon->Command("get_default_active_thread_percentage")) {
    daemon->fatal_seen_ = daemon->ReadLog().fatal_exceptions;
    auto mode = nvml.GpuByPci(config.pci_address);
    auto current = mode ? nvml.GetComputeMode(*mode) : Result<nvml::ComputeMode>(mode.error());
    if (!current || *current != nvml::ComputeMode::kExclusiveProcess) {
      if (auto status = daemon->SetComputeMode(true); !status) return status.error();
    }
    if (ReadReadyMarker(*paths) != daemon->hash_) {
      if (auto status = daemon->Apply(config); !status) return status.error();
    }
    spdlog::info("MPS daemon of {}: taken over (config {})", config.gpu_uuid, daemon->hash_);
    return daemon;
  }
  if (auto status = daemon->StartFresh(); !status) {
    (void)daemon->Stop();  // best effort: nothing half-made stays behind
    return status.error();
  }
  return daemon;
}

Status Daemon::Remove(const Options& options, const nvml::Library& nvml,
                      const std::string& gpu_uuid, const std::string& pci_address) {
  auto paths = PathsFor(options.root, gpu_uuid);
  if (!paths) return paths.error();
  Options resolved = options;
  const std::string found = process::FindExecutable(options.control_binary);
  if (!found.empty()) resolved.control_binary = found;
  DaemonConfig config{gpu_uuid, pci_address, uint64_t{1} << 20, 100};
  Daemon daemon(resolved, nvml, config, *paths);
  return daemon.Stop();
}

std::vector<std::string> Daemon::Existing(const std::string& root) {
  std::vector<std::string> uuids;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(root, error)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory(error) && PathsFor(root, name)) uuids.push_back(name);
    if (uuids.size() == 1024) break;
  }
  std::sort(uuids.begin(), uuids.end());
  return uuids;
}

Result<std::string> Daemon::Command(std::string_view command) const {
  process::Options run;
  run.timeout_ms = static_cast<int>(options_.command_timeout.count());
  run.input = std::string(command) + "\n";
  run.environment = {"CUDA_MPS_PIPE_DIRECTORY=" + paths_.pipe,
                     "CUDA_MPS_LOG_DIRECTORY=" + paths_.log};
  run.max_output = 64 * 1024;
  const std::string verb(command.substr(0, command.find(' ')));
  auto outcome = process::Run({options_.control_binary}, run);
  if (!outcome)
    return Unavailable("MPS control of " + config_.gpu_uuid + ": " + outcome.error().message);
  if (outcome->timed_out)
    return Unavailable("MPS control daemon of " + config_.gpu_uuid + " did not answer " + verb +
                       " within " + std::to_string(options_.command_timeout.count()) + " ms");
  if (outcome->status != 0)
    return Unavailable("MPS control daemon of " + config_.gpu_uuid + ": " + verb +
                       " failed (status " + std::to_string(outcome->status) +
                       "): " + Excerpt(outcome->output, 200));
  return std::move(outcome->output);
}

std::optional<uint32_t> Daemon::ControlPid() const {
  auto text = ReadTail(paths_.pipe + "/" + kPidFile, 32);
  if (!text) return std::nullopt;
  return ParsePid(*text);
}

LogFacts Daemon::ReadLog() const {
  return ReadLogsOf(paths_);
}

Status Daemon::SetComputeMode(bool exclusive) {
  auto gpu = nvml_.GpuByPci(config_.pci_address);
  if (!gpu) return gpu.error().WithContext("compute mode of " + config_.gpu_uuid);
  const auto mode = exclusive ? nvml::ComputeMode::kExclusiveProcess : nvml::ComputeMode::kDefault;
  if (auto status = nvml_.SetComputeMode(*gpu, mode); !status)
    return status.error().WithContext(config_.gpu_uuid);
  return Ok();
}

Status Daemon::WriteMarker() {
  // /run is a tmpfs: a marker needs to survive a crash of tessera, never a power loss.
  return WriteFileAtomically(paths_.ready, hash_ + "\n", 0644, Durability::kProcessCrash);
}

Status Daemon::ApplyLimits(bool running_servers) {
  for (const std::string& command : DefaultLimitCommands(config_)) {
    if (auto out = Command(command); !out) return out.error();
  }
  if (running_servers) {
    // The defaults reach only servers started after them; running ones get the same limits.
    auto servers = Command("get_server_list");
    if (!servers) return servers.error();
    for (uint32_t server : PidsOf(*servers)) {
      for (const std::string& command :
           {"set_device_pinned_mem_limit " + std::to_string(server) + " 0 " +
                std::to_string(config_.pinned_memory_limit_bytes >> 20) + "M",
            "set_active_thread_percentage " + std::to_string(server) + " " +
                std::to_string(config_.active_thread_percentage)}) {
        if (auto out = Command(command); !out) return out.error();
      }
    }
  }
  // The daemon must say back what it was given before any client may come.
  auto answer = Command("get_default_active_thread_percentage");
  if (!answer) return answer.error();
  std::string text = *answer;
  while (!text.empty() && (text.back() == '\n' || text.back() == ' '))
    text.pop_back();
  double value = -1;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() ||
      value != static_cast<double>(config_.active_thread_percentage))
    return FailedPrecondition("MPS control daemon of " + config_.gpu_uuid +
                              " reports active thread percentage \"" + Excerpt(text, 20) +
                              "\", not " + std::to_string(config_.active_thread_percentage));
  return Ok();
}

void Daemon::KillLeftovers() {
  // Servers first (they hold the GPU's context), then the control daemon.
  const LogFacts facts = ReadLog();
  for (uint32_t server : facts.servers_started) {
    if (Alive(static_cast<pid_t>(server)) &&
        Runs(static_cast<pid_t>(server), "nvidia-cuda-mps-server"))
      KillAndWait(static_cast<pid_t>(server), options_.command_timeout);
  }
  if (auto pid = ControlPid(); pid && Alive(static_cast<pid_t>(*pid)) &&
                               Runs(static_cast<pid_t>(*pid), BaseName(options_.control_binary)))
    KillAndWait(static_cast<pid_t>(*pid), options_.command_timeout);
  ::unlink((paths_.pipe + "/" + kControlSocket).c_str());
  ::unlink((paths_.pipe + "/" + kPidFile).c_str());
}

Status Daemon::StartFresh() {
  if (auto status = RemoveFile(paths_.ready, Durability::kProcessCrash); !status) return status;
  KillLeftovers();
  for (const std::string& dir : {options_.root, paths_.dir, paths_.pipe, paths_.log}) {
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
      return ErrnoError("mkdir " + dir, errno);
  }
  if (auto status = MountShm(paths_.shm, options_.shm_bytes); !status) return status;
  if (auto status = SetComputeMode(true); !status) return status;

  process::Options run;
  run.timeout_ms = static_cast<int>(options_.start_timeout.count());
  run.environment = {"CUDA_VISIBLE_DEVICES=" + config_.gpu_uuid,
                     "CUDA_MPS_PIPE_DIRECTORY=" + paths_.pipe,
                     "CUDA_MPS_LOG_DIRECTORY=" + paths_.log};
  run.output_file = paths_.dir + "/control.out";
  auto started = process::Run({options_.control_binary, "-d"}, run);
  if (!started) return started.error();
  if (started->timed_out || started->status != 0)
    return Unavailable(options_.control_binary + " -d for " + config_.gpu_uuid +
                       (started->timed_out
                            ? " did not return"
                            : " exited with status " + std::to_string(started->status)) +
                       " (see " + run.output_file + ")");
  // The daemon forks away; its socket appears once it listens.
  const auto deadline = Clock::now() + options_.start_timeout;
  while (!Exists(paths_.pipe + "/" + kControlSocket)) {
    if (Clock::now() >= deadline)
      return Unavailable("MPS control daemon of " + config_.gpu_uuid +
                         " made no control socket within " +
                         std::to_string(options_.start_timeout.count()) + " ms");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (auto status = ApplyLimits(false); !status) return status;
  fatal_seen_ = ReadLog().fatal_exceptions;
  if (auto status = WriteMarker(); !status) return status;
  spdlog::info("MPS daemon of {}: ready (config {})", config_.gpu_uuid, hash_);
  return Ok();
}

Status Daemon::Apply(const DaemonConfig& config) {
  if (config.gpu_uuid != config_.gpu_uuid)
    return InvalidArgument("MPS config for " + config.gpu_uuid + " given to the daemon of " +
                           config_.gpu_uuid);
  if (auto status = CheckConfig(config); !status) return status;
  const std::string hash = ConfigHash(config);
  if (hash == hash_ && ReadReadyMarker(paths_) == hash_) return Ok();
  // No client may start between here and the new marker.
  if (auto status = RemoveFile(paths_.ready, Durability::kProcessCrash); !status) return status;
  config_ = config;
  hash_ = hash;
  if (auto status = ApplyLimits(true); !status) return status;
  if (auto status = WriteMarker(); !status) return status;
  spdlog::info("MPS daemon of {}: config {} applied", config_.gpu_uuid, hash_);
  return Ok();
}

Status Daemon::Check() {
  auto pid = ControlPid();
  if (!pid) return Unavailable("MPS control daemon of " + config_.gpu_uuid + " has no pid file");
  if (!Alive(static_cast<pid_t>(*pid)))
    return Unavailable("MPS control daemon " + std::to_string(*pid) + " of " + config_.gpu_uuid +
                       " is gone");
  if (auto answer = Command("get_default_active_thread_percentage"); !answer)
    return Unavailable("MPS control daemon of " + config_.gpu_uuid +
                       " stopped answering: " + answer.error().message);
  const uint32_t fatal = ReadLog().fatal_exceptions;
  if (fatal > fatal_seen_) {
    fatal_seen_ = fatal;
    return Unavailable("an MPS server of " + config_.gpu_uuid +
                       " reported a fatal exception (it reaches every client)");
  }
  return Ok();
}

Status Daemon::Restart() {
  if (auto status = RemoveFile(paths_.ready, Durability::kProcessCrash); !status) return status;
  spdlog::warn("MPS daemon of {}: restarting", config_.gpu_uuid);
  return StartFresh();
}

Status Daemon::TerminateClient(uint32_t pid) {
  auto servers = Command("get_server_list");
  if (!servers) return servers.error();
  const auto pids = PidsOf(*servers);
  if (pids.empty()) return NotFound("no MPS server runs on " + config_.gpu_uuid);
  for (uint32_t server : pids) {
    auto out = Command("terminate_client " + std::to_string(server) + " " + std::to_string(pid));
    if (!out) return out.error();
  }
  return Ok();
}

Status Daemon::Stop() {
  Status first = RemoveFile(paths_.ready, Durability::kProcessCrash);
  auto keep = [&first](Status status) {
    if (first && !status) first = status;
  };
  if (auto pid = ControlPid(); pid && Alive(static_cast<pid_t>(*pid))) {
    if (Command("quit")) {
      const auto deadline = Clock::now() + options_.command_timeout;
      while (Alive(static_cast<pid_t>(*pid)) && Clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  KillLeftovers();
  keep(SetComputeMode(false));
  keep(UnmountShm(paths_.shm));
  if (!IsMountPoint(paths_.shm)) {
    std::error_code error;
    std::filesystem::remove_all(paths_.dir, error);
    if (error) keep(Internal("remove " + paths_.dir + ": " + error.message()));
  }
  if (first) spdlog::info("MPS daemon of {}: stopped", config_.gpu_uuid);
  return first;
}

std::vector<DaemonReport> InspectDaemons(const std::string& root) {
  std::vector<DaemonReport> reports;
  for (const std::string& uuid : Daemon::Existing(root)) {
    DaemonReport report;
    report.gpu_uuid = uuid;
    report.paths = *PathsFor(root, uuid);
    if (auto text = ReadTail(report.paths.pipe + "/" + kPidFile, 32))
      report.control_pid = ParsePid(*text);
    report.running = report.control_pid && Alive(static_cast<pid_t>(*report.control_pid));
    report.marker = ReadReadyMarker(report.paths);
    report.shm_mounted = IsMountPoint(report.paths.shm);
    report.log = ReadLogsOf(report.paths);
    reports.push_back(std::move(report));
  }
  return reports;
}

}  // namespace tessera::mps

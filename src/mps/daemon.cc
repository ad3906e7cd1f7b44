// One GPU's MPS control daemon: start in the contract's order, take over after a restart of
// tessera, apply a changed config, check, restart, terminate a client, tear down.
//
// The pipe directory is where clients reach the daemon, and containers are given it: nothing
// tessera does depends on a file there. The daemon is the process tessera started
// (`nvidia-cuda-mps-control -f`, known by PID and start time, kept in a state file beside the
// pipe directory, never in it); its control socket is used only while it is a socket of this
// service's user; every command has a time limit; every file is read with O_NOFOLLOW and
// O_NONBLOCK and a bound.
//
// Not thread-safe: the owner (serve's shared-GPU keeper, the device plugin's agent) calls one
// daemon from one thread at a time.
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <thread>

#include "common/atomic_file.h"
#include "common/untrusted_text.h"
#include "mps/guarded_files.h"
#include "mps/mps.h"
#include "nvml/nvml.h"
#include "process/process.h"

namespace tessera::mps {
namespace {

using Clock = std::chrono::steady_clock;
using internal::Owner;

constexpr char kControlSocket[] = "control";
constexpr size_t kMaxStateBytes = 256;

void KillAndWait(const ProcessIdentity& process, std::chrono::milliseconds patience) {
  if (!internal::IsRunning(process)) return;
  ::kill(static_cast<pid_t>(process.pid), SIGKILL);
  const auto deadline = Clock::now() + patience;
  while (internal::IsRunning(process) && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

// control.log and server.log (their tails) read out. The log directory is tessera's, never a
// container's, but the reads are guarded all the same.
LogFacts ReadLogsOf(const Paths& paths) {
  std::string text;
  for (const char* name : {"control.log", "server.log"}) {
    // A server runs as its clients' user and may write its own log.
    auto tail = internal::ReadGuardedTail(paths.log + "/" + name, kLogTailBytes, Owner::kAny);
    if (!tail) continue;
    // A tail cut mid-line starts with a fragment; the parser counts it as malformed.
    text += *tail;
    if (!text.empty() && text.back() != '\n') text += '\n';
  }
  return ReadLogFacts(text);
}

std::optional<ProcessIdentity> ReadState(const Paths& paths) {
  auto text = internal::ReadGuardedTail(paths.state, kMaxStateBytes);
  if (!text) return std::nullopt;
  return ParseDaemonState(*text);
}

Status MakeDirectory(const std::string& dir, mode_t mode) {
  if (::mkdir(dir.c_str(), mode) != 0 && errno != EEXIST) return ErrnoError("mkdir " + dir, errno);
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return ErrnoError("stat " + dir, errno);
  if (!S_ISDIR(st.st_mode) || st.st_uid != ::geteuid())
    return FailedPrecondition(dir + ": not a directory of this service's user");
  return Ok();
}

}  // namespace

std::string ReadReadyMarker(const Paths& paths) {
  auto text = internal::ReadGuardedTail(paths.ready, 256);
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

  // A daemon this service started in an earlier run, that still answers, keeps its clients:
  // take it over. Known by the state file beside the pipe directory, never by anything in it.
  auto earlier = ReadState(*paths);
  if (earlier && internal::IsRunning(*earlier) && IsMountPoint(paths->pipe) &&
      IsMountPoint(paths->shm)) {
    daemon->process_ = *earlier;
    if (daemon->Command("get_default_active_thread_percentage")) {
      daemon->fatal_seen_ = daemon->ReadLog().fatal_exceptions;
      auto gpu = nvml.GpuByPci(config.pci_address);
      auto current = gpu ? nvml.GetComputeMode(*gpu) : Result<nvml::ComputeMode>(gpu.error());
      if (!IsMigDevice(config.gpu_uuid) &&
          (!current || *current != nvml::ComputeMode::kExclusiveProcess)) {
        if (auto status = daemon->SetComputeMode(true); !status) return status.error();
      }
      if (ReadReadyMarker(*paths) != daemon->hash_) {
        if (auto status = daemon->Apply(config); !status) return status.error();
      }
      spdlog::info("MPS daemon of {}: taken over (pid {}, config {})", config.gpu_uuid,
                   earlier->pid, daemon->hash_);
      return daemon;
    }
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
  if (auto earlier = ReadState(*paths); earlier && internal::IsRunning(*earlier))
    daemon.process_ = *earlier;
  return daemon.Stop();
}

std::vector<std::string> Daemon::Existing(const std::string& root) {
  std::vector<std::string> uuids;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(root, error)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory(error) && !entry.is_symlink(error) && PathsFor(root, name))
      uuids.push_back(name);
    if (uuids.size() == 1024) break;
  }
  std::sort(uuids.begin(), uuids.end());
  return uuids;
}

Result<std::string> Daemon::Command(std::string_view command) const {
  const std::string verb(command.substr(0, command.find(' ')));
  // The client follows CUDA_MPS_PIPE_DIRECTORY/control: only to the daemon's own socket, never
  // to whatever else may lie there (a symlink to another GPU's daemon).
  if (!internal::IsRunning(process_))
    return Unavailable("MPS control daemon of " + config_.gpu_uuid + " is not running (" + verb +
                       ")");
  if (auto socket = internal::CheckOwnSocket(paths_.pipe + "/" + kControlSocket); !socket)
    return Unavailable("MPS control daemon of " + config_.gpu_uuid + ": " + socket.error().message);
  process::Options run;
  run.timeout_ms = static_cast<int>(options_.command_timeout.count());
  run.input = std::string(command) + "\n";
  run.environment = {"CUDA_MPS_PIPE_DIRECTORY=" + paths_.pipe,
                     "CUDA_MPS_LOG_DIRECTORY=" + paths_.log};
  run.max_output = 64 * 1024;
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
  if (!internal::IsRunning(process_)) return std::nullopt;
  return process_.pid;
}

LogFacts Daemon::ReadLog() const {
  return ReadLogsOf(paths_);
}

Status Daemon::SetComputeMode(bool exclusive) {
  // A MIG device's daemon is one of several on its GPU: the GPU's compute mode stays as it is.
  if (IsMigDevice(config_.gpu_uuid)) return Ok();
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

void Daemon::KillLeftovers() {
  // Servers first (they hold the GPU's context), then the control daemon. A server is killed
  // only while it is a child of the daemon tessera started: the log names PIDs, and a PID is
  // reused.
  const LogFacts facts = ReadLog();
  for (uint32_t server : facts.servers_started) {
    auto stat = internal::ReadProcStat(server);
    if (!stat || process_.pid == 0 || stat->ppid != process_.pid) continue;
    if (auto identity = internal::IdentityOf(server))
      KillAndWait(*identity, options_.command_timeout);
  }
  KillAndWait(process_, options_.command_timeout);
  process_ = {};
  (void)RemoveFile(paths_.state, Durability::kProcessCrash);
}

Status Daemon::StartFresh() {
  if (auto status = RemoveFile(paths_.ready, Durability::kProcessCrash); !status) return status;
  KillLeftovers();
  // The directory holds tessera's files; only the pipe directory and the shm below it are given
  // to containers (as mounts of their own).
  if (auto status = MakeDirectory(options_.root, 0711); !status) return status;
  if (auto status = MakeDirectory(paths_.dir, 0711); !status) return status;
  if (auto status = MakeDirectory(paths_.log, 0755); !status) return status;
  // A fresh pipe file system each start: whatever an earlier daemon or a client left in it goes.
  if (auto status = UnmountShm(paths_.pipe); !status) return status;
  if (auto status = MakeDirectory(paths_.pipe, 0755); !status) return status;
  if (auto status = MountShm(paths_.pipe, options_.pipe_bytes, 0755); !status) return status;
  if (auto status = MountShm(paths_.shm, options_.shm_bytes); !status) return status;
  if (auto status = SetComputeMode(true); !status) return status;

  // In the foreground, as this service's child: its PID is the daemon's, with no pid file to
  // trust.
  process::Options run;
  run.environment = {"CUDA_VISIBLE_DEVICES=" + config_.gpu_uuid,
                     "CUDA_MPS_PIPE_DIRECTORY=" + paths_.pipe,
                     "CUDA_MPS_LOG_DIRECTORY=" + paths_.log};
  run.output_file = paths_.log + "/control.out";
  auto started = process::StartBackground({options_.control_binary, "-f"}, run);
  if (!started) return started.error();
  auto identity = internal::IdentityOf(static_cast<uint32_t>(*started));
  if (!identity)
    return Unavailable(options_.control_binary + " -f for " + config_.gpu_uuid +
                       " exited at once (see " + run.output_file + ")");
  process_ = *identity;
  if (auto status = WriteFileAtomically(paths_.state, FormatDaemonState(process_), 0600,
                                        Durability::kProcessCrash);
      !status)
    return status;
  // Its socket appears once it listens.
  const std::string socket = paths_.pipe + "/" + kControlSocket;
  const auto deadline = Clock::now() + options_.start_timeout;
  while (!internal::CheckOwnSocket(socket)) {
    if (!internal::IsRunning(process_))
      return Unavailable("MPS control daemon of " + config_.gpu_uuid +
                         " exited before it listened (see " + run.output_file + ")");
    if (Clock::now() >= deadline)
      return Unavailable("MPS control daemon of " + config_.gpu_uuid +
                         " made no control socket within " +
                         std::to_string(options_.start_timeout.count()) + " ms");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (auto status = ApplyLimits(false); !status) return status;
  fatal_seen_ = ReadLog().fatal_exceptions;
  if (auto status = WriteMarker(); !status) return status;
  spdlog::info("MPS daemon of {}: ready (pid {}, config {})", config_.gpu_uuid, process_.pid,
               hash_);
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
  if (!internal::IsRunning(process_))
    return Unavailable("MPS control daemon " + std::to_string(process_.pid) + " of " +
                       config_.gpu_uuid + " is gone");
  auto drift = LimitDrift();
  if (!drift)
    return Unavailable("MPS control daemon of " + config_.gpu_uuid +
                       " stopped answering: " + drift.error().message);
  if (!drift->empty()) {
    // A client holds the control socket; it may set limits. They are put back at once.
    spdlog::warn("MPS daemon of {}: limits changed from outside ({}); restoring them",
                 config_.gpu_uuid, *drift);
    ++limits_restored_;
    if (auto status = ApplyLimits(true); !status)
      return Unavailable(
          "MPS daemon of " + config_.gpu_uuid +
          ": limits changed from outside and could not be restored: " + status.error().message);
  }
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
  const auto pids = internal::PidsOfAnswer(*servers);
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
  if (internal::IsRunning(process_) && Command("quit")) {
    const auto deadline = Clock::now() + options_.command_timeout;
    while (internal::IsRunning(process_) && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  KillLeftovers();
  keep(SetComputeMode(false));
  keep(UnmountShm(paths_.shm));
  keep(UnmountShm(paths_.pipe));
  if (!IsMountPoint(paths_.shm) && !IsMountPoint(paths_.pipe)) {
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
    auto state = ReadState(report.paths);
    if (state) report.control_pid = state->pid;
    report.running = state && internal::IsRunning(*state);
    report.marker = ReadReadyMarker(report.paths);
    report.shm_mounted = IsMountPoint(report.paths.shm);
    report.log = ReadLogsOf(report.paths);
    reports.push_back(std::move(report));
  }
  return reports;
}

}  // namespace tessera::mps

// NVIDIA MPS owned by tessera: one control daemon per shared GPU, with its own pipe, log and
// shm directories under /run/tessera/mps/<uuid>/, its limits applied before a ready marker that
// carries the config's hash, a health check, terminate_client, and a teardown that puts the GPU
// back as it was. Used by `tessera serve` (MPS shares) and the device plugin (MPS replicas).
//
// The order is the contract (docs/serve.md, "Sharing a GPU"): compute mode EXCLUSIVE_PROCESS,
// then `nvidia-cuda-mps-control -d`, then the limits, then the marker. Nothing may start a
// client until the marker holds the hash of the config it was placed under, after a config
// change too (NVIDIA's device plugin let Pods start before the limits, #1946, and still does
// after a config change, #2055).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace tessera::nvml {
class Library;
}

namespace tessera::mps {

// ---------------------------------------------------------------------------------------------
// MPS logs (control.log and server.log): "[2026-02-06 09:34:17.770 Control   261] message".
// Pure: bytes in, facts out; lines longer than kMaxLogLine, and lines of another shape, are
// counted and skipped.

inline constexpr size_t kMaxLogLine = 4096;
// How much of each log file is read: its last 256 KiB.
inline constexpr size_t kLogTailBytes = 256 * 1024;

struct LogLine {
  std::string date;    // "2026-02-06"
  std::string time;    // "09:34:17.770"
  std::string source;  // "Control", "Server", "Other", "Legacy Server"
  uint32_t pid = 0;
  std::string message;
};
// Every well-formed line of `text`, in order (the last `max_lines` of them).
std::vector<LogLine> ParseLogLines(std::string_view text, size_t max_lines = 4096);

struct ServerExit {
  uint32_t pid = 0;
  int status = 0;
};
// What tessera reads out of the logs: the daemon's version, its servers' lives and deaths, fatal
// faults (one reaches every client of that server), and the limits a server says it applied.
struct LogFacts {
  std::optional<uint32_t> control_version;  // "CUDA MPS Control binary version: 13000"
  std::vector<uint32_t> servers_started;    // "Starting new server 337 for user 0"
  std::vector<uint32_t> servers_ready;      // "NEW SERVER 11803: Ready"
  std::vector<ServerExit> servers_exited;   // "Server 95 exited with status 1"
  uint32_t fatal_exceptions = 0;            // "Server encountered a fatal exception. ..."
  // server.log: "Device pinned memory limit for device 0 set to 0x140000000 bytes",
  // "Active Threads Percentage set to 33.0" (the last ones seen).
  std::optional<uint64_t> pinned_memory_limit;
  std::optional<double> active_thread_percentage;
  size_t lines = 0;      // well-formed lines
  size_t malformed = 0;  // lines of another shape, or too long
};
LogFacts ReadLogFacts(std::string_view text);

// ---------------------------------------------------------------------------------------------
// One daemon's config and files.

// A daemon serves one GPU, or one MIG device ("MIG-…"): each MIG device of a GPU has a daemon of
// its own, with its own directories, as NVIDIA's MIG guide runs MPS. A MIG device's daemon never
// touches the compute mode: it is the whole GPU's, and EXCLUSIVE_PROCESS does not go with MIG
// (one MPS server per MIG device).
struct DaemonConfig {
  std::string gpu_uuid;     // "GPU-…"/"MIG-…": the daemon's CUDA_VISIBLE_DEVICES and directory
  std::string pci_address;  // how NVML finds the GPU for its compute mode (the parent's for MIG)
  // Applied as the daemon's defaults, and to every running server on a change.
  uint64_t pinned_memory_limit_bytes = 0;  // set_default_device_pinned_mem_limit 0 <MiB>M
  int active_thread_percentage = 100;      // set_default_active_thread_percentage
  friend bool operator==(const DaemonConfig&, const DaemonConfig&) = default;
};
// Whether a daemon's UUID names a MIG device ("MIG-…").
bool IsMigDevice(std::string_view uuid);
// InvalidArgument naming the field: a UUID that is not "GPU-" or "MIG-" and hex (it names a
// directory), a limit under 1 MiB, a percentage outside 1..100.
Status CheckConfig(const DaemonConfig& config);
// "sha256:<hex>" of the config's canonical text: what the ready marker holds.
std::string ConfigHash(const DaemonConfig& config);
// The limit commands, in the order they are sent (device 0: the daemon sees only its GPU).
std::vector<std::string> DefaultLimitCommands(const DaemonConfig& config);
// The daemon's answer to get_default_device_pinned_mem_limit in bytes: digits with an optional
// K, M, G or T (and B). nullopt for anything else, or a value past 2^64.
std::optional<uint64_t> ParseMemoryLimitAnswer(std::string_view text);

// Where a daemon's files live. Containers are given the pipe directory (read-only: a client
// only connects to sockets there) and the shm; the rest is tessera's alone and never bound into
// a container. tessera trusts nothing it reads in the pipe directory (docs/sharing.md, "What a
// tenant can reach").
struct Paths {
  std::string dir;    // <root>/<uuid>
  std::string pipe;   // CUDA_MPS_PIPE_DIRECTORY: a sized tmpfs of its own, the daemon's sockets
  std::string log;    // CUDA_MPS_LOG_DIRECTORY: control.log, server.log, control.out
  std::string shm;    // a private tmpfs (nosuid, nodev, noexec, sized): the clients' /dev/shm
  std::string ready;  // the ready marker: the config's hash, written after the limits
  std::string state;  // the daemon's PID and start time, as tessera started it
};
// InvalidArgument when the UUID is not one (see CheckConfig).
Result<Paths> PathsFor(const std::string& root, const std::string& gpu_uuid);
// The hash in a GPU's ready marker; empty when there is none.
std::string ReadReadyMarker(const Paths& paths);

// ---------------------------------------------------------------------------------------------
// The daemon.

// ---------------------------------------------------------------------------------------------
// The daemon's process: known by the PID tessera started and that process's start time, never
// by a pid file in the pipe directory.

struct ProcessIdentity {
  uint32_t pid = 0;
  uint64_t start_time = 0;  // /proc/<pid>/stat field 22: clock ticks after boot
  friend bool operator==(const ProcessIdentity&, const ProcessIdentity&) = default;
};
// The state file: "tessera-mps-daemon 1\npid <pid>\nstart_time <ticks>\n". Strict.
std::string FormatDaemonState(const ProcessIdentity& daemon);
std::optional<ProcessIdentity> ParseDaemonState(std::string_view text);

struct Options {
  std::string root = "/run/tessera/mps";
  // Found through PATH unless it names a path (tests give a stand-in).
  std::string control_binary = "nvidia-cuda-mps-control";
  uint64_t shm_bytes = uint64_t{64} << 20;
  // The pipe directory's own tmpfs: sockets take no room, so a little is plenty, and whatever
  // fills it fills only this daemon's.
  uint64_t pipe_bytes = uint64_t{1} << 20;
  // A control command that takes longer means the daemon stopped answering.
  std::chrono::milliseconds command_timeout{5000};
  // From `-d` until the control socket is there.
  std::chrono::milliseconds start_timeout{30000};
};

class Daemon {
 public:
  // The GPU's daemon, ready under `config`: one still answering from an earlier run (a service
  // restart keeps its clients) is taken over and given the config; otherwise leftovers are
  // cleared and it is started, in the contract's order. The marker is removed before anything
  // else unless it already holds this config's hash and the daemon answers. On failure what was
  // started is torn down again.
  static Result<std::unique_ptr<Daemon>> Open(const Options& options, const nvml::Library& nvml,
                                              const DaemonConfig& config);
  // Tears down what an earlier run left for a GPU that is no longer shared through MPS: as
  // Stop(), whatever state it is in.
  static Status Remove(const Options& options, const nvml::Library& nvml,
                       const std::string& gpu_uuid, const std::string& pci_address);
  // The GPU UUIDs with a directory under `root` (daemons of this or an earlier run).
  static std::vector<std::string> Existing(const std::string& root);

  // Leaves the daemon running (its clients keep their server); Stop() tears it down.
  ~Daemon() = default;
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // A changed config: the marker goes first, then the defaults and each running server's own
  // limits, then the marker with the new hash. The GPU (UUID) cannot change.
  Status Apply(const DaemonConfig& config);
  // Whether the daemon tessera started lives and answers within the command timeout, and no
  // server reported a fatal fault since the last check. Unavailable saying which otherwise. Its
  // default limits are read back each time; limits that anyone else moved (a client holds the
  // control socket) are logged and restored before it returns Ok.
  Status Check();
  // After a failed check: the marker goes, what is left of the daemon is killed, and it starts
  // again with the same config, marker last.
  Status Restart();
  // terminate_client for `pid` on each running server (MPS's way to end one client's work
  // without touching the others). NotFound when no server runs.
  Status TerminateClient(uint32_t pid);
  // Teardown: marker, `quit`, compute mode DEFAULT, unmount the shm, remove the directories.
  Status Stop();

  // One control command ("get_server_list"); its output. Unavailable on a timeout or failure.
  Result<std::string> Command(std::string_view command) const;
  // control.log and server.log (their tails) read out.
  LogFacts ReadLog() const;

  const DaemonConfig& config() const { return config_; }
  const std::string& hash() const { return hash_; }
  const Paths& paths() const { return paths_; }
  // The PID of the daemon tessera started; nullopt when none runs.
  std::optional<uint32_t> ControlPid() const;
  // How often limits moved by someone else were put back since this object was made.
  uint64_t limits_restored() const { return limits_restored_; }

 private:
  Daemon(const Options& options, const nvml::Library& nvml, DaemonConfig config, Paths paths);
  Status StartFresh();
  Status ApplyLimits(bool running_servers);
  // The daemon's default limits now, compared with the config's; empty when they match.
  Result<std::string> LimitDrift();
  Status WriteMarker();
  Status SetComputeMode(bool exclusive);
  void KillLeftovers();

  Options options_;
  const nvml::Library& nvml_;
  DaemonConfig config_;
  std::string hash_;
  Paths paths_;
  ProcessIdentity process_;  // the daemon tessera started (or took over from its state file)
  uint32_t fatal_seen_ = 0;  // fatal exceptions in the log at the last check
  uint64_t limits_restored_ = 0;
};

// What `tessera doctor` says of each daemon under a root: read only, nothing is asked of the
// daemons themselves.
struct DaemonReport {
  std::string gpu_uuid;
  Paths paths;
  std::optional<uint32_t> control_pid;  // from tessera's state file
  bool running = false;                 // that process lives
  std::string marker;                   // the ready marker's hash; empty: not ready
  bool shm_mounted = false;
  LogFacts log;
};
std::vector<DaemonReport> InspectDaemons(const std::string& root);

// Mounts a tmpfs of `bytes` at `path` (nosuid, nodev, noexec, `mode`) unless one is there.
Status MountShm(const std::string& path, uint64_t bytes, mode_t mode = 01777);
// Unmounts it (lazily: a client's open file must not keep the teardown from finishing).
Status UnmountShm(const std::string& path);
// Whether a file system is mounted exactly at `path` (/proc/self/mountinfo).
bool IsMountPoint(const std::string& path);

}  // namespace tessera::mps

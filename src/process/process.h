// Running other programs without a shell: argv in, exit status and captured output out, with a
// time limit. Used for podman (backends/local) and firmware-check commands (serve).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace tessera::process {

struct Options {
  int timeout_ms = -1;          // -1: no limit; on expiry the process group gets SIGKILL
  size_t max_output = 1 << 20;  // keep at most this many bytes (the last ones)
  bool capture_stderr = true;   // stderr into the same buffer as stdout
  // Written to the program's stdin, which is then closed (default: stdin is /dev/null).
  std::string input;
  // "NAME=value" entries set in the program's environment on top of this process's own.
  std::vector<std::string> environment;
  // When set, stdout and stderr are appended to this file instead of being captured, and Run
  // waits for the program itself to exit, not for every holder of its output to close it: a
  // program that leaves a daemon behind (`nvidia-cuda-mps-control -d`) returns with it.
  std::string output_file;
};

struct Outcome {
  int status = -1;         // exit status; 128 + signal when killed by one
  bool timed_out = false;  // killed because the time limit passed
  std::string output;      // stdout (and stderr), tail-truncated to max_output
};

// Runs argv[0] (searched in PATH) with argv, stdin from /dev/null, in its own process group.
// Errors only when it could not be started (the message names the program).
Result<Outcome> Run(const std::vector<std::string>& argv, const Options& options = {});

// A started child whose output is read through `output_fd` (stdout and stderr together).
struct Child {
  pid_t pid = -1;
  int output_fd = -1;
};
Result<Child> Spawn(const std::vector<std::string>& argv);
// Reads the child's output until EOF (keeping the last `max_output` bytes), then reaps it.
Outcome Finish(Child child, size_t max_output = 64 * 1024);

// Starts a long-running program (a daemon in the foreground) and does not wait for it: its pid,
// which the caller owns (it reaps it, or init does once the caller is gone). Its own process
// group, so the caller's signals do not reach it; stdin is /dev/null and its output goes to
// `options.output_file` (required), so no pipe ties it to the caller.
Result<pid_t> StartBackground(const std::vector<std::string>& argv, const Options& options);

// /proc/<pid>/stat as far as tessera needs it (proc_stat.cc, pure): who a PID is now, and since
// when, so that a PID the kernel gave to another process is never taken for the one seen before.
struct ProcStat {
  char state = '?';         // field 3: R, S, D, Z, ...
  uint32_t ppid = 0;        // field 4
  uint64_t start_time = 0;  // field 22: clock ticks after boot
};
inline constexpr size_t kMaxProcStatBytes = 4096;  // only these are looked at
// nullopt for anything of another shape (the name may hold any bytes, ')' included).
std::optional<ProcStat> ParseProcStat(std::string_view text);

// "prog 'arg with space' ..." for log lines and error messages.
std::string Describe(const std::vector<std::string>& argv);

// Where exec would find `program`: itself when it names a path (and is executable), else the
// first executable match in PATH (a default PATH when unset). Empty when there is none.
std::string FindExecutable(const std::string& program);

}  // namespace tessera::process

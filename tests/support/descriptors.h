// What a process holds open, read from /proc: for tests proving that nothing the service opens
// reaches the programs it starts (podman, conmon, runsc, the MPS daemon, nvidia-smi).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace tessera::testing {

struct OpenDescriptor {
  int fd = -1;
  std::string target;  // readlink of /proc/<pid>/fd/<fd>: a path, "socket:[ino]", "pipe:[ino]"
  bool close_on_exec = false;  // O_CLOEXEC in /proc/<pid>/fdinfo/<fd>
};

// Every descriptor of `pid` (empty once it is gone or when it cannot be read).
std::vector<OpenDescriptor> DescriptorsOf(pid_t pid);

// "socket:[ino]" of every listening TCP socket on `port` (/proc/net/tcp and tcp6).
std::set<std::string> ListeningSockets(uint16_t port);

// Every process that holds `target` (a "socket:[ino]" or a path) open, `except` left out.
std::vector<pid_t> HoldersOf(const std::string& target, pid_t except = -1);

// Processes whose command line contains `needle` (conmon names its container's ID).
std::vector<pid_t> ProcessesWithCommandLine(const std::string& needle);
// `pid`'s children, their children, and so on.
std::vector<pid_t> DescendantsOf(pid_t pid);

// What `child` holds above stdio that is also one of `owner`'s descriptors above stdio: a file,
// socket or pipe the owner opened and the child inherited. Each as "fd N -> TARGET". Anonymous
// inodes (their names are not unique) and /dev/null are not compared.
std::vector<std::string> InheritedFrom(pid_t owner, pid_t child);

// A report written by tests/support/fd_witness.c: the descriptors a program had when it was
// exec'd, one "FD TARGET" line each. The witness's reports in `dir` as (file name, lines above
// stdio).
struct WitnessReport {
  std::string name;                // "<program>.<pid>"
  std::vector<std::string> extra;  // descriptors above 2, "FD TARGET"
};
std::vector<WitnessReport> WitnessReports(const std::string& dir);

}  // namespace tessera::testing

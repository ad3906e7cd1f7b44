// The files an attacker hands a program in place of a config, a spec, a token or a state file:
// /dev/zero, a symlink to it, a FIFO that nobody writes, and a 2 GiB sparse file. A program must
// refuse each at once, naming it, without reading it whole: tests run the program under an
// address-space limit, so an unbounded read fails loudly instead of eating the machine.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "support/fixture_host.h"

namespace tessera::testing {

struct HostileFile {
  std::string kind;  // "/dev/zero", "symlink to /dev/zero", "FIFO", "2 GiB sparse file"
  std::string path;
};

// The four: /dev/zero itself, and the others in a fresh temp dir, each under a name ending in
// `suffix` (".yaml", ".json", ...), since some programs pick a format by the name.
class HostileFiles {
 public:
  explicit HostileFiles(const std::string& suffix = "");
  const std::vector<HostileFile>& all() const { return files_; }
  // Places one more of `kind` at `path` (a symlink to it for /dev/zero).
  static void Make(const std::string& kind, const std::string& path);

 private:
  TempDir dir_;
  std::vector<HostileFile> files_;
};

struct LimitedRun {
  int exit_code = -1;  // 128 + signal when killed
  bool timed_out = false;
  std::string output;  // stdout and stderr
  std::chrono::milliseconds took{0};
};

// An address space that a program's start fits in many times over, and that reading a 2 GiB
// file or /dev/zero whole runs out of.
inline constexpr size_t kHostileFileAddressSpace = size_t{1} << 30;

// Runs argv[0] with argv under RLIMIT_AS = `address_space`, stdin from /dev/null and `env`
// added to the environment; killed (and timed_out set) after `timeout`.
LimitedRun RunUnderLimits(const std::vector<std::string>& argv,
                          size_t address_space = kHostileFileAddressSpace,
                          std::chrono::milliseconds timeout = std::chrono::seconds(60),
                          const std::vector<std::string>& env = {});

// A billion-laughs document: `head` (valid lines of the format), then `key` holding nine levels
// of ten aliases each, 10^9 strings once expanded, in under a kilobyte.
std::string AliasBomb(const std::string& head, const std::string& key);

// Empty when `run` refused `file` as it must: the program ended by itself (not killed, not out of
// time, not aborted for want of memory) with a failure status, and its output names the file
// and the `reason` ("a FIFO", "larger than"); otherwise what went wrong, with the output.
std::string RefusalProblem(const LimitedRun& run, const std::string& path,
                           const std::string& reason);
// The reason a reader gives for each kind of hostile file.
std::string ReasonFor(const HostileFile& file);

}  // namespace tessera::testing

// The daemon's files as tessera reads them: never through a symlink, never a FIFO or a device,
// never more than a bound, never blocking. Internal to mps/.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "mps/mps.h"
#include "process/process.h"

namespace tessera::mps::internal {

enum class Owner { kAny, kThisUser };

// The last `max_bytes` of the regular file at `path`. Opened with O_NOFOLLOW and O_NONBLOCK (a
// FIFO put in its place neither blocks nor is read), then checked on the descriptor: a regular
// file, owned by this process's user when `owner` says so. NotFound when absent;
// FailedPrecondition naming the path for anything else in its place.
Result<std::string> ReadGuardedTail(const std::string& path, size_t max_bytes,
                                    Owner owner = Owner::kThisUser);

// Ok when `path` is a socket owned by this process's user, not a symlink to one: the only
// control socket tessera will talk through. FailedPrecondition naming what is there otherwise.
Status CheckOwnSocket(const std::string& path);

// /proc/<pid>/stat read out; nullopt when the process is gone or the file makes no sense.
std::optional<process::ProcStat> ReadProcStat(uint32_t pid);

// Whether the process tessera knows as `daemon` still runs: the PID lives, is no zombie, and
// started when it did (a reused PID started later). A zombie child of this process is reaped.
bool IsRunning(const ProcessIdentity& daemon);

// Every whole number on its own line of a control answer ("get_server_list"), at most 256.
std::vector<uint32_t> PidsOfAnswer(std::string_view output);

// The identity of the running process `pid` (nullopt when it is gone).
std::optional<ProcessIdentity> IdentityOf(uint32_t pid);

}  // namespace tessera::mps::internal

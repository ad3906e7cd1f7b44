// Nothing tessera opens is inherited by the programs it starts (podman, conmon, runc, runsc, the
// MPS daemon, nvidia-smi, firmware checks): every descriptor is close-on-exec from the call that
// makes it. A listening socket a child inherits outlives the service (after a kill -9, conmon
// would hold the API's port and the restart could not bind); a store or lease file it inherits
// can be written through by a program that was never meant to see it.
//
// Raw calls carry the flag themselves (O_CLOEXEC, SOCK_CLOEXEC, accept4, pipe2, fopen "e"); the
// functions here cover what libraries open without it, and the child-side last line of defence.
// Boost.Asio's sockets: common/asio_cloexec.h.
#pragma once

#include <vector>

#include "common/error.h"

namespace tessera {

// Sets FD_CLOEXEC on `fd` (a descriptor some library opened without it).
Status SetCloseOnExec(int fd);
// Whether `fd` is open and close-on-exec.
bool IsCloseOnExec(int fd);

// This process's open descriptors above stderr that an exec would pass on, read from
// /proc/self/fd (checks and tests: it should be empty).
std::vector<int> InheritableDescriptors();

// Between fork and exec in the child: closes every descriptor from `first` up. Async-signal-safe
// (close_range(2), else a close(2) loop up to the descriptor limit).
void CloseDescriptorsFrom(int first) noexcept;

}  // namespace tessera

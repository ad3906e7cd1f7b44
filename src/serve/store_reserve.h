// The store's reserve: space kept free on the data directory's file system so that the store
// can always write (a DELETE, a container's end, a lease's release), whatever the containers
// print. Work that would add to what the file system holds (a submission, a tenancy change)
// is refused before the free space, less what the live containers' logs may still grow to,
// falls under the reserve.
#pragma once

#include <cstdint>
#include <string>

#include "common/error.h"

namespace tessera::serve {

struct StoreReserve {
  uint64_t reserve_bytes = 0;  // 0: no check
  uint64_t log_max_bytes = 0;  // each container's log cap (0: logs are not counted)
};

// Unavailable (503 at the edge) when the file system of `dir` has less than the reserve free
// for unprivileged writers (statvfs f_bavail) once `running_containers` logs of log_max_bytes each
// are set aside; the message names the figures and the flag, never a path a caller sent.
Status CheckStoreReserve(const std::string& dir, const StoreReserve& reserve,
                         int64_t running_containers);

}  // namespace tessera::serve

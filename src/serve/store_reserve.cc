#include "serve/store_reserve.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <cerrno>

namespace tessera::serve {
namespace {

std::string Mebibytes(uint64_t bytes) {
  return std::to_string(bytes >> 20) + " MiB";
}

}  // namespace

Status CheckStoreReserve(const std::string& dir, const StoreReserve& reserve,
                         int64_t running_containers) {
  if (reserve.reserve_bytes == 0) return Ok();
  struct statvfs fs {};
  if (::statvfs(dir.c_str(), &fs) != 0) return ErrnoError("statvfs " + dir, errno);
  const unsigned __int128 free_bytes = static_cast<unsigned __int128>(fs.f_bavail) * fs.f_frsize;
  // Each running container's log may still grow to its cap; that much is spoken for.
  const unsigned __int128 logs =
      static_cast<unsigned __int128>(running_containers > 0 ? running_containers : 0) *
      reserve.log_max_bytes;
  const uint64_t left =
      free_bytes > logs
          ? static_cast<uint64_t>(std::min<unsigned __int128>(free_bytes - logs, UINT64_MAX))
          : 0;
  if (left >= reserve.reserve_bytes) return Ok();
  return Unavailable(
      "the data directory's file system has " +
      Mebibytes(static_cast<uint64_t>(std::min<unsigned __int128>(free_bytes, UINT64_MAX))) +
      " free, " + Mebibytes(left) + " once " + std::to_string(running_containers) +
      " running containers' logs may reach their cap: below the store's reserve of " +
      Mebibytes(reserve.reserve_bytes) + " (--store-reserve); new work waits until space is freed");
}

}  // namespace tessera::serve

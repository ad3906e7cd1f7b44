// /proc/<pid>/stat's start time (proc(5): field 22, `starttime`, in clock ticks after boot),
// through the one parser of that file (process::ParseProcStat). Pure.
#include "process/process.h"
#include "telemetry/telemetry.h"

namespace tessera::telemetry {

std::optional<uint64_t> StartTicksOfProcStat(std::string_view text) {
  auto stat = process::ParseProcStat(text.substr(0, kMaxStatFile));
  if (!stat) return std::nullopt;
  return stat->start_time;
}

}  // namespace tessera::telemetry

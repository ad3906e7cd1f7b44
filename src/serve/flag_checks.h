// What tessera-serve's flags may hold: the range of each duration, and the shape of the paths
// that end up inside another program's syntax (podman's --mount). Pure: text in, a value or an
// error naming the flag out. flag_paths.h checks what the paths name on this host.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "common/error.h"

namespace tessera::serve {

// A duration flag and the range it is held to; docs/serve.md lists them.
struct DurationFlag {
  std::string_view name;
  std::chrono::milliseconds low;
  std::chrono::milliseconds high;
};

// Upper bounds keep every value far from what the consumers' arithmetic can hold (the watchdog
// compares the grace with steady_clock's nanoseconds: 1000000d wrapped there to no grace at all;
// the MPS command timeout goes to an int of milliseconds), and name the point past which a value
// is a mistake rather than a choice.
inline constexpr DurationFlag kShareGraceFlag{"--share-grace", std::chrono::milliseconds(100),
                                              std::chrono::hours(1)};
inline constexpr DurationFlag kShareCheckIntervalFlag{
    "--share-check-interval", std::chrono::milliseconds(10), std::chrono::minutes(1)};
inline constexpr DurationFlag kMpsCommandTimeoutFlag{
    "--mps-command-timeout", std::chrono::milliseconds(100), std::chrono::minutes(5)};
inline constexpr DurationFlag kTelemetryIntervalFlag{
    "--telemetry-interval", std::chrono::milliseconds(100), std::chrono::hours(1)};
inline constexpr DurationFlag kRetainFinishedFlag{"--retain-finished", std::chrono::seconds(1),
                                                  std::chrono::hours(24 * 3660)};
inline constexpr DurationFlag kRetentionSweepIntervalFlag{
    "--retention-sweep-interval", std::chrono::milliseconds(10), std::chrono::hours(24)};
// At least an hour (a shorter trail records nothing an operator could look at); at most ten
// years, as --retain-finished.
inline constexpr DurationFlag kAuditRetentionFlag{"--audit-retention", std::chrono::hours(1),
                                                  std::chrono::hours(24 * 3660)};
inline constexpr DurationFlag kFairShareHalfLifeFlag{
    "--fair-share-half-life", std::chrono::seconds(1), std::chrono::hours(24 * 365)};

// `text` as a duration (serve::ParseDuration: a whole number and a unit, refused rather than
// wrapped when it overflows) within the flag's range. The error names the flag, the value (an
// excerpt) and the range: "--share-grace 1000000d: must be from 100ms to 1h".
Result<std::chrono::milliseconds> ParseDurationFlag(const DurationFlag& flag,
                                                    std::string_view text);

// In the largest unit that holds it whole: 1h, 90s, 3660d, 250ms.
std::string FormatDuration(std::chrono::milliseconds duration);

// Any path a flag names: not empty, shorter than PATH_MAX, and no control characters (a line
// break in a path splits log lines, and the kernel shows such paths escaped in mountinfo).
Status CheckPathText(std::string_view flag, std::string_view path);

// A host directory that podman gets inside --mount=type=bind,source=PATH,...: podman reads that
// argument as one CSV record (encoding/csv) of key=value fields, so `,` would start a field of
// the path's choosing, `"` would quote and a line break would start a second record. The path
// must also be absolute (podman resolves a relative one against its own working directory) and
// in normal form, never `/` itself: the service finds its own mounts under it by comparing with
// /proc/self/mountinfo, which shows normal paths only.
Status CheckMountSourcePath(std::string_view flag, std::string_view path);

// The program of "PROGRAM [ARGS]", split at spaces as the firmware checker runs it.
std::string_view CommandProgram(std::string_view command);

}  // namespace tessera::serve

// What tessera-serve's flags may hold: the range of each duration, and the shape of the paths
// that end up inside another program's syntax (podman's --mount). Pure: text in, a value or an
// error naming the flag out. flag_paths.h checks what the paths name on this host.
#pragma once

#include <chrono>
#include <cstdint>
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
// Each fabric-manager call's deadline (fabricmanager::NvfmOptions::timeout_ms, an unsigned of
// milliseconds): below 100ms a loaded fabric manager would miss it; above 5m it bounds nothing.
inline constexpr DurationFlag kFabricManagerTimeoutFlag{
    "--fabric-manager-timeout", std::chrono::milliseconds(100), std::chrono::minutes(5)};
// At least an hour (a shorter trail records nothing an operator could look at); at most ten
// years, as --retain-finished.
inline constexpr DurationFlag kAuditRetentionFlag{"--audit-retention", std::chrono::hours(1),
                                                  std::chrono::hours(24 * 3660)};
// GPU faults: the window faults are counted in (a minute to ten years), how often NVML state
// is read between events, and how long one reset or self-test may run.
inline constexpr DurationFlag kFaultWindowFlag{"--fault-window", std::chrono::minutes(1),
                                               std::chrono::hours(24 * 3660)};
inline constexpr DurationFlag kHealthPollIntervalFlag{
    "--health-poll-interval", std::chrono::milliseconds(100), std::chrono::hours(1)};
inline constexpr DurationFlag kGpuRecoveryTimeoutFlag{
    "--gpu-recovery-timeout", std::chrono::seconds(1), std::chrono::hours(2)};
inline constexpr DurationFlag kFairShareHalfLifeFlag{
    "--fair-share-half-life", std::chrono::seconds(1), std::chrono::hours(24 * 365)};

// `text` as a duration (serve::ParseDuration: a whole number and a unit, refused rather than
// wrapped when it overflows) within the flag's range. The error names the flag, the value (an
// excerpt) and the range: "--share-grace 1000000d: must be from 100ms to 1h".
Result<std::chrono::milliseconds> ParseDurationFlag(const DurationFlag& flag,
                                                    std::string_view text);

// A byte-size flag and the range it is held to; docs/serve.md lists them.
struct SizeFlag {
  std::string_view name;
  uint64_t low;
  uint64_t high;
};
// Each container's podman log (k8s-file): podman's conmon empties the file when the next line
// would pass the cap, so a container that prints without end holds at most this much of disk.
// Below 64 KiB a log holds too little to be read; past 1 TiB it is no cap.
inline constexpr SizeFlag kContainerLogMaxFlag{"--container-log-max", uint64_t{64} << 10,
                                               uint64_t{1} << 40};
// Space kept free on the data directory's file system for the store: work is refused below it.
// 0 turns the check off; past 1 TiB it is a mistake.
inline constexpr SizeFlag kStoreReserveFlag{"--store-reserve", 0, uint64_t{1} << 40};

// `text` as bytes: a whole number with an optional binary suffix (Ki, Mi, Gi, Ti), within the
// flag's range: "--container-log-max 1k: want a whole number of bytes, Ki, Mi, Gi or Ti".
Result<uint64_t> ParseSizeFlag(const SizeFlag& flag, std::string_view text);
// The shortest exact form ParseSizeFlag reads back: "16Mi", "1536Ki", "100".
std::string FormatSize(uint64_t bytes);

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

// The API listener's TLS flags (docs/tls.md).
struct TlsFlags {
  std::string cert;       // --tls-cert
  std::string key;        // --tls-key
  std::string client_ca;  // --tls-client-ca
  bool insecure_http = false;
};

// An address only this host reaches: 127.0.0.0/8, ::1, or ::ffff:127.x.x.x. Anything else, a
// wildcard (0.0.0.0, ::) included, is reachable from the network.
bool IsLoopbackAddress(std::string_view host);

// --tls-cert and --tls-key together (paths of sane text), --tls-client-ca only with them, and
// --insecure-http only without them; `listen_host` (HOST of --listen, brackets removed) outside
// the loopback addresses needs TLS, or --insecure-http to say plain HTTP there is meant. Whether
// the files make a certificate is tls::ServerContextSource::Open's to say.
Status CheckTlsFlags(std::string_view listen_host, const TlsFlags& flags);

}  // namespace tessera::serve

// What podman and the kernel answer the local backend's start check: /proc/<pid>/limits of conmon
// and the output of a failed `podman run`, both diagnosed as the backend does.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "runtimes/runtimes.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto limits = tessera::runtimes::ParseProcLimits(bytes);
  if (limits) (void)tessera::runtimes::UlimitArgsWithin({*limits});
  tessera::runtimes::ProbeOutcome outcome{125, false, std::string(bytes)};
  (void)tessera::runtimes::DiagnosePodmanFailure("runc", outcome, {});
  return 0;
}

// podman's k8s-file container logs: written by the container runtime from whatever the
// container prints, then read back by the local backend for GET /v1/containers/{id}/logs.
#include <cstddef>
#include <cstdint>
#include <string>

#include "backends/local/local.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string log(reinterpret_cast<const char*>(data), size);
  std::string text = tessera::backends::TextOfCriLog(log);
  // Records only lose their prefixes: the text is never longer than the log plus one newline
  // per line.
  if (text.size() > log.size() + 1) __builtin_trap();
  return 0;
}

// /proc/<pid>/stat's start time: whatever the bytes, nothing before the last ')' (the command
// name a process chooses for itself) changes the answer, and an answer comes only from a digit
// run of field 22.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "telemetry/telemetry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace t = tessera::telemetry;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto ticks = t::StartTicksOfProcStat(text);
  const std::string_view bounded = text.substr(0, t::kMaxStatFile);
  const size_t close = bounded.rfind(')');
  if (close == std::string_view::npos) {
    if (ticks) __builtin_trap();
    return 0;
  }
  // Another command name, the same fields: the same answer (when the name was well formed).
  if (bounded.find('(') < close) {
    const std::string other = "(" + std::string(bounded.substr(close));
    if (t::StartTicksOfProcStat(other) != ticks) __builtin_trap();
  }
  if (ticks && std::to_string(*ticks).size() > 20) __builtin_trap();
  return 0;
}

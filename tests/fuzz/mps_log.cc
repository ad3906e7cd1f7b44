// MPS control.log and server.log as tessera reads them (their tails): any bytes are read in
// bounded time and memory, and every fact comes from a well-formed line.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "mps/mps.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::mps;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  const LogFacts facts = ReadLogFacts(text);
  const auto lines = ParseLogLines(text, 64);
  if (lines.size() > 64 || lines.size() > facts.lines) __builtin_trap();
  if (facts.servers_started.size() > facts.lines || facts.fatal_exceptions > facts.lines)
    __builtin_trap();
  if (facts.active_thread_percentage &&
      (*facts.active_thread_percentage < 0 || *facts.active_thread_percentage > 100))
    __builtin_trap();
  for (const auto& line : lines) {
    if (line.date.size() != 10 || line.message.size() > kMaxLogLine || line.source.empty())
      __builtin_trap();
  }
  return 0;
}

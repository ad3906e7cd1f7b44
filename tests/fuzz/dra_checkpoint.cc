// The checkpoint file: whatever parses serializes and parses back to the same value.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "dra/dra.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto checkpoint = tessera::dra::ParseCheckpoint(text);
  if (!checkpoint) {
    if (checkpoint.error().message.empty() || checkpoint.error().message.size() > 400) {
      __builtin_trap();
    }
    return 0;
  }
  auto again = tessera::dra::ParseCheckpoint(tessera::dra::SerializeCheckpoint(*checkpoint));
  if (!again || !(*again == *checkpoint)) __builtin_trap();
  return 0;
}

// `tessera mig apply`'s files: a layout (--config) or a profile table (--profiles), picked by
// the first byte. Any text is a value or an error naming the problem, never a crash, whatever
// its aliases or nesting.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "mig/mig.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  if (data[0] & 1) {
    auto table = tessera::mig::ParseProfileTable(text);
    if (!table && table.error().message.empty()) std::abort();
  } else {
    auto layout = tessera::mig::ParseLayoutConfig(text, (data[0] & 2) ? "all-1g" : "");
    if (!layout && layout.error().message.empty()) std::abort();
  }
  return 0;
}

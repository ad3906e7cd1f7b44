// Share requests from tenants (`--share`, the API's `share.memory`): whatever is accepted is in
// range, and the memory's canonical form reads back to the same bytes.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "sharing/sharing.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::sharing;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto memory = ParseMemory(text)) {
    if (*memory < kMinShareMemory || *memory > kMaxShareMemory) __builtin_trap();
    auto again = ParseMemory(FormatMemory(*memory));
    if (!again || *again != *memory) __builtin_trap();
  }
  if (auto share = ParseShareFlag(text)) {
    if (!CheckShare(*share)) __builtin_trap();
    const double fraction = Fraction(*share, uint64_t{80} << 30);
    if (!(fraction > 0 && fraction <= 1)) __builtin_trap();
    auto edits =
        MpsClientEdits(*share, "/run/tessera/mps/GPU-1/pipe", "/run/tessera/mps/GPU-1/shm");
    if (share->mode == Mode::kMps && edits.env.size() != 3) __builtin_trap();
  }
  return 0;
}

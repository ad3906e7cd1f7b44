// Memory of the GPU boards whose size follows from their PCI device ID alone. The BARs cannot say
// it: BAR1 is an aperture sized by the firmware (an H100 80GB maps 128 GiB), so a GPU whose ID
// is not listed here publishes no memory capacity rather than a guess.
#include "dra/dra.h"

namespace tessera::dra {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

struct Board {
  uint16_t device_id;
  uint64_t memory_gib;
};

// NVIDIA device IDs with one memory size each (product specifications); IDs shared by several
// memory variants are left out on purpose.
constexpr Board kNvidiaBoards[] = {
    {0x20b0, 40},  // A100 SXM4 40GB
    {0x20b2, 80},  // A100 SXM4 80GB
    {0x20b5, 80},  // A100 PCIe 80GB
    {0x20f1, 40},  // A100 PCIe 40GB
    {0x2330, 80},  // H100 SXM5 80GB
    {0x2331, 80},  // H100 PCIe 80GB
    {0x2684, 24},  // GeForce RTX 4090
    {0x26b5, 48},  // L40
    {0x26b9, 48},  // L40S
    {0x27b8, 24},  // L4
};

}  // namespace

std::optional<uint64_t> KnownBoardMemory(uint16_t vendor_id, uint16_t device_id) {
  if (vendor_id != 0x10de) return std::nullopt;
  for (const Board& board : kNvidiaBoards) {
    if (board.device_id == device_id) return board.memory_gib * kGiB;
  }
  return std::nullopt;
}

}  // namespace tessera::dra

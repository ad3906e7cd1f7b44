// The utility VM's MMIO gaps for an assigned GPU, from the memory ranges the host gave it.
//
// Microsoft's rule (Plan for Deploying Devices using DDA, "MMIO Space"): the gap is the devices'
// MMIO plus a buffer for the VM's other virtual devices, the default gaps (128 MB low, 512 MB
// high). Ranges the host placed below 4 GiB count for the low gap: 32-bit BARs are among them and
// the guest must place those below 4 GiB too. The high gap starts above the VM's memory (which
// fills the space below the low gap first, the rest above 4 GiB), aligned to the largest high
// range: a BAR sits at a multiple of its own power-of-two size, and placed largest first from such
// a base the BARs fill the gap without holes.
#include <bit>

#include "windows/hyperv.h"

namespace tessera::windows {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t k4GiB = 4ull << 30;
constexpr uint64_t k4GiBInMb = 4096;

uint64_t CeilMb(uint64_t bytes) {
  return bytes / kMiB + (bytes % kMiB != 0 ? 1 : 0);
}

uint64_t AlignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

}  // namespace

Result<MmioPlan> PlanMmio(const std::vector<MemoryRange>& ranges, uint64_t memory_mb) {
  if (ranges.empty()) return InvalidArgument("no memory ranges to size the MMIO gaps from");
  if (memory_mb == 0 || memory_mb > (1ull << 30)) {
    return InvalidArgument("memory size " + std::to_string(memory_mb) + " MB is out of range");
  }
  MmioPlan plan;
  for (const MemoryRange& r : ranges) {
    if (r.end < r.start) return InvalidArgument("a memory range ends below its start");
    uint64_t size = r.Size();  // 0 only for the whole 64-bit space, which no device has
    if (size == 0) return InvalidArgument("a memory range covers the whole address space");
    uint64_t& total = r.end < k4GiB ? plan.below_4g_bytes : plan.above_4g_bytes;
    if (total > UINT64_MAX - size) return InvalidArgument("memory ranges add up past 2^64");
    total += size;
    if (r.end >= k4GiB) plan.largest_above_4g_bytes = std::max(plan.largest_above_4g_bytes, size);
  }
  plan.low_gap_mb = kDefaultLowMmioGapMb + CeilMb(plan.below_4g_bytes);
  if (plan.low_gap_mb >= k4GiBInMb) {
    return InvalidArgument("ranges below 4 GiB need a low MMIO gap of " +
                           std::to_string(plan.low_gap_mb) + " MB, more than 4 GiB");
  }
  plan.high_gap_mb = kDefaultHighMmioGapMb + CeilMb(plan.above_4g_bytes);
  uint64_t below_gap_mb = k4GiBInMb - plan.low_gap_mb;
  uint64_t memory_top_mb = k4GiBInMb + (memory_mb > below_gap_mb ? memory_mb - below_gap_mb : 0);
  uint64_t alignment_mb = std::bit_ceil(std::max<uint64_t>(1, CeilMb(plan.largest_above_4g_bytes)));
  plan.high_base_mb = AlignUp(memory_top_mb, alignment_mb);
  return plan;
}

}  // namespace tessera::windows

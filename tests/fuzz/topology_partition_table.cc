// Partition tables from YAML or JSON (first byte picks the format), then everything a valid
// table feeds: compiling, choosing for every size, activating.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "topology/topology.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  using namespace tessera::topology;
  const TableFormat format = (data[0] & 1) ? TableFormat::kJson : TableFormat::kYaml;
  std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  auto table = ParsePartitionTable(text, format);
  if (!table) return 0;
  // A valid table must survive its own JSON.
  auto again = ParsePartitionTable(PartitionTableToJson(*table), TableFormat::kJson);
  if (!again || !(*again == *table)) __builtin_trap();
  auto planner = PartitionPlanner::Create(*table);
  if (!planner) __builtin_trap();
  ActivationState state(*planner);
  for (int k = 1; k <= (*planner)->module_count(); ++k) {
    GpuMask free = (*planner)->all_modules() & ~state.busy_modules();
    auto choice = (*planner)->Choose(free, k);
    if (choice) {
      if ((choice->modules & ~free) != 0) __builtin_trap();
      if (!state.Activate(choice->partition_id).ok()) __builtin_trap();
    }
  }
  return 0;
}

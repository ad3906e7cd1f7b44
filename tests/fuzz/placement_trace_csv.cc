// Trace CSV parsing, then a short simulation of what parsed.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "placement/placement.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::placement;
  auto trace = ParseTraceCsv(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!trace) return 0;
  if (trace->size() > 200) trace->resize(200);
  static auto planner =
      tessera::topology::PartitionPlanner::Create(tessera::topology::HgxH100Table());
  auto fleet = Fleet::Uniform(3, 8, *planner);
  if (!fleet) __builtin_trap();
  auto result = Simulate(std::move(*fleet), *trace, {Policy::kBinpack, true});
  if (!result) return 0;
  if (result->admitted + result->rejected != result->requests) __builtin_trap();
  return 0;
}

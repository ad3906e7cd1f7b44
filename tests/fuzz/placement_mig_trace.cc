// MIG fleet trace reading, then the written form read back, then a short simulation of what
// parsed on a small fleet, by demand and with a static split.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "placement/mig_fleet.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::placement;
  auto trace = ParseMigTrace(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!trace) return 0;
  auto again = ParseMigTrace(MigTraceToText(*trace));
  if (!again || again->size() != trace->size()) __builtin_trap();
  if (trace->size() > 200) trace->resize(200);
  MigSimOptions options;
  options.nodes = 2;
  auto demand = SimulateMigFleet(*trace, options);
  if (!demand) __builtin_trap();
  options.policy = MigPolicy::kStatic;
  const auto family = StaticLayoutFamily();
  options.split.nodes = {{family.front(), 1}, {family[1 + size % (family.size() - 1)], 1}};
  auto fixed = SimulateMigFleet(*trace, options);
  if (!fixed) __builtin_trap();
  for (const MigSimResult* r : {&*demand, &*fixed}) {
    if (r->started + r->waiting_at_end + r->never_placeable > r->requests) __builtin_trap();
    if (r->gpu_hours > 16 * r->horizon_s / 3600 + 1e-6) __builtin_trap();
  }
  return 0;
}

// A trace with tenancies, replayed under fair scheduling (quotas, reservations, backfill) and
// FIFO on a small HGX fleet: both must account for every request.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "scheduling/scheduling.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  auto trace =
      placement::ParseTraceCsv(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!trace) return 0;
  if (trace->size() > 200) trace->resize(200);
  static auto planner = topology::PartitionPlanner::Create(topology::HgxH100Table());
  for (scheduling::Mode mode : {scheduling::Mode::kFair, scheduling::Mode::kFifo}) {
    auto fleet = placement::Fleet::Uniform(3, 8, *planner);
    if (!fleet) __builtin_trap();
    scheduling::QueueSimulationOptions options;
    options.scheduler.mode = mode;
    options.scheduler.preemption = true;
    if (mode == scheduling::Mode::kFair && !trace->empty())
      options.tenancies[trace->front().tenancy].quota_gpus = 8;
    auto result = scheduling::SimulateQueue(std::move(*fleet), *trace, options);
    if (!result) return 0;
    if (result->base.admitted + result->base.rejected != result->base.requests) __builtin_trap();
    int64_t per_tenancy = 0;
    for (const auto& [name, stats] : result->per_tenancy)
      per_tenancy += stats.requests;
    if (per_tenancy != result->base.requests) __builtin_trap();
  }
  return 0;
}

#include "serve/metering.h"

#include <algorithm>

namespace tessera::serve {

double OverlapGpuMs(double gpus, int64_t started_ms, int64_t finished_ms, int64_t from_ms,
                    int64_t to_ms) {
  const int64_t begin = std::max(started_ms, from_ms);
  const int64_t end = std::min(finished_ms, to_ms);
  return end > begin ? gpus * static_cast<double>(end - begin) : 0;
}

fleet::UsageRecord UsageOf(const fleet::ContainerRecord& container, const std::string& gpu_model) {
  fleet::UsageRecord record;
  if (container.started_ms <= 0 || container.gpus.empty()) return record;
  record.container_id = container.id;
  record.tenancy = container.spec.tenancy;
  record.tenancy_uid = container.tenancy_uid;
  record.gpus = fleet::GpuEquivalents(container);
  record.started_ms = container.started_ms;
  record.finished_ms = std::max(container.finished_ms, container.started_ms);
  record.measured = container.measured;
  record.gpu_model = gpu_model;
  record.mode = container.spec.mig.count > 0 ? "mig" : "gpu";
  return record;
}

fleet::MeasuredUsage MeasuredWithin(const fleet::MeasuredUsage& measured, int64_t started_ms,
                                    int64_t finished_ms, int64_t from_ms, int64_t to_ms) {
  if (finished_ms <= started_ms) {
    return started_ms >= from_ms && started_ms < to_ms ? measured : fleet::MeasuredUsage{};
  }
  const double share = OverlapGpuMs(1.0, started_ms, finished_ms, from_ms, to_ms) /
                       static_cast<double>(finished_ms - started_ms);
  return {measured.sm_seconds * share, measured.memory_gib_seconds * share,
          measured.energy_joules * share};
}

void WaitHistogram::Observe(double seconds) {
  size_t i = 0;
  while (i < kBounds.size() && seconds > kBounds[i])
    ++i;
  buckets[i]++;
  count++;
  sum += seconds;
}

void Meter::Load(std::vector<fleet::UsageRecord> records) {
  for (auto& record : records)
    Add(std::move(record));
}

void Meter::Add(fleet::UsageRecord record) {
  ended_gpu_ms_[record.tenancy] +=
      record.gpus * static_cast<double>(record.finished_ms - record.started_ms);
  if (record.measured)
    ended_measured_[{record.tenancy, record.gpu_model, record.mode}] += *record.measured;
  records_[record.tenancy].push_back(std::move(record));
}

const std::vector<fleet::UsageRecord>& Meter::Of(const std::string& tenancy) const {
  static const std::vector<fleet::UsageRecord> kNone;
  auto it = records_.find(tenancy);
  return it == records_.end() ? kNone : it->second;
}

}  // namespace tessera::serve

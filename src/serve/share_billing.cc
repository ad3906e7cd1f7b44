#include "serve/share_billing.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "serve/metering.h"

namespace tessera::serve {

namespace {

// Below this a part or a rest is rounding of sums of fractions, not something to bill.
constexpr double kEpsilon = 1e-9;

}  // namespace

std::string HeldRunId(const fleet::GpuRecord& gpu) {
  std::string id = "held-" + gpu.id();
  for (char& c : id)
    if (c == ':' || c == '@') c = '-';
  return id;
}

double ChargedPart(double fraction, double others, bool whole_gpu) {
  if (!whole_gpu) return fraction;
  return std::clamp(std::min(fraction, 1.0 - others), 0.0, 1.0);
}

double ShareHolds::Hold::Rest() const {
  double sum = 0;
  for (const auto& [id, part] : running)
    sum += part;
  return std::max(0.0, 1.0 - sum);
}

void ShareHolds::Resegment(Hold& hold, int64_t at_ms, bool reopen, Meter& meter,
                           std::vector<fleet::Mutation>* out) {
  // Close the open segment with the rest as it was.
  if (hold.since_ms > 0) {
    const int64_t end_ms = std::max(at_ms, hold.since_ms);
    const double rest = hold.Rest();
    if (rest > kEpsilon && end_ms > hold.since_ms) {
      fleet::UsageRecord record;
      record.container_id = hold.run_id;
      record.tenancy = hold.name;
      record.tenancy_uid = hold.uid;
      record.gpus = rest;
      record.started_ms = hold.since_ms;
      record.finished_ms = end_ms;
      record.gpu_model = hold.gpu_model;
      record.mode = hold.mode;
      meter.Add(record);
      if (out) out->push_back(std::move(record));
    } else {
      meter.Stopped(hold.uid, hold.run_id);
    }
    at_ms = end_ms;
  }
  hold.since_ms = 0;
  if (!reopen) return;
  hold.since_ms = at_ms;
  if (hold.Rest() > kEpsilon)
    meter.Started(hold.uid, hold.name, hold.run_id, hold.Rest(), hold.since_ms);
}

void ShareHolds::Started(const fleet::GpuRecord& gpu, const fleet::ContainerRecord& container,
                         Meter& meter, std::vector<fleet::Mutation>& out) {
  if (!container.spec.share || !whole(*container.spec.share) || container.started_ms <= 0) return;
  auto [it, created] = holds_.try_emplace({gpu.id(), container.tenancy_uid});
  Hold& hold = it->second;
  if (created) {
    hold.uid = container.tenancy_uid;
    hold.name = container.spec.tenancy;
    hold.run_id = HeldRunId(gpu);
    hold.gpu_model = gpu.model;
    hold.mode = kShareSeriesMode;
  }
  if (hold.running.count(container.id)) return;
  // The rest changes from its start: the segment before it ends there.
  Resegment(hold, container.started_ms, false, meter, &out);
  hold.running[container.id] = container.share_gpus;
  Resegment(hold, container.started_ms, true, meter, &out);
}

int64_t ShareHolds::Left(const fleet::GpuRecord& gpu, const fleet::ContainerRecord& container,
                         bool ran, int64_t ended_ms, Meter& meter,
                         std::vector<fleet::Mutation>& out) {
  if (!container.spec.share || !whole(*container.spec.share)) return 0;
  auto it = holds_.find({gpu.id(), container.tenancy_uid});
  if (it == holds_.end()) return 0;
  Hold& hold = it->second;
  const bool still =
      std::any_of(gpu.shares.begin(), gpu.shares.end(),
                  [&](const fleet::ShareHolder& holder) { return holder.tenancy_uid == hold.uid; });
  const bool was_running = hold.running.count(container.id) > 0;
  if (ran || was_running) hold.last_end_ms = std::max(hold.last_end_ms, ended_ms);
  if (was_running) {
    Resegment(hold, ended_ms, false, meter, &out);
    hold.running.erase(container.id);
    if (still) Resegment(hold, ended_ms, true, meter, &out);
  }
  if (still) return 0;
  // Its last share there: the GPU is held until the latest end of its shares (a share that never
  // ran still held it until it left).
  const int64_t end_ms = std::max({hold.last_end_ms, ended_ms, hold.since_ms});
  Resegment(hold, end_ms, false, meter, &out);
  holds_.erase(it);
  return end_ms;
}

void ShareHolds::Adopt(const fleet::GpuRecord& gpu, const std::string& uid, const std::string& name,
                       const std::vector<const fleet::ContainerRecord*>& running,
                       const std::vector<const fleet::ContainerRecord*>& ended, Meter& meter) {
  const auto mode_of = [](const std::vector<const fleet::ContainerRecord*>& list) {
    for (const auto* container : list)
      if (container->spec.share && container->spec.share->mig_profile.empty())
        return std::optional<sharing::Mode>(container->spec.share->mode);
    return std::optional<sharing::Mode>();
  };
  auto mode = mode_of(running);
  if (!mode) mode = mode_of(ended);
  if (!mode || !whole_gpu(*mode)) return;
  Hold& hold = holds_[{gpu.id(), uid}];
  hold.uid = uid;
  hold.name = name;
  hold.run_id = HeldRunId(gpu);
  hold.gpu_model = gpu.model;
  hold.mode = kShareSeriesMode;
  // The open segment began at the last change of its running shares: the latest start of one
  // that runs, or end of one that ended while the GPU was leased (updated_ms: it became active,
  // at the first start of this hold; an end before that was an earlier lease's).
  int64_t since_ms = 0;
  for (const auto* container : running) {
    if (container->started_ms <= 0) continue;
    hold.running[container->id] = container->share_gpus;
    since_ms = std::max(since_ms, container->started_ms);
  }
  for (const auto* container : ended) {
    if (container->finished_ms < gpu.updated_ms) continue;
    hold.last_end_ms = std::max(hold.last_end_ms, container->finished_ms);
    since_ms = std::max(since_ms, container->finished_ms);
  }
  if (since_ms <= 0) return;  // none of its shares has run yet: billed from the first start
  spdlog::info("GPU {}: held whole by tenancy {} since {} ms ({} shares running)", gpu.id(), name,
               since_ms, hold.running.size());
  hold.since_ms = 0;
  Resegment(hold, since_ms, true, meter, nullptr);
}

}  // namespace tessera::serve

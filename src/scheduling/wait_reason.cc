// Names, validation and the words that tell a tenant why its request waits.
#include <cmath>
#include <cstdint>
#include <cstdio>

#include "scheduling/scheduling.h"

namespace tessera::scheduling {

const char* ModeName(Mode mode) {
  return mode == Mode::kFifo ? "fifo" : "fair";
}

Result<Mode> ParseMode(std::string_view name) {
  if (name == "fifo") return Mode::kFifo;
  if (name == "fair") return Mode::kFair;
  return InvalidArgument("scheduling \"" + std::string(name.substr(0, 32)) +
                         "\": unknown (fifo, fair)");
}

Status ValidateTenancyPolicy(const TenancyPolicy& policy) {
  if (!(policy.weight >= kMinWeight && policy.weight <= kMaxWeight)) {
    return InvalidArgument("weight: expected " + std::to_string(kMinWeight) + ".." +
                           std::to_string(static_cast<int>(kMaxWeight)));
  }
  if (policy.quota_gpus != kUnlimited &&
      (policy.quota_gpus < 0 || policy.quota_gpus > kMaxQuotaGpus)) {
    return InvalidArgument("quota.gpus: " + std::to_string(policy.quota_gpus) + " (expected 0.." +
                           std::to_string(kMaxQuotaGpus) + ")");
  }
  if (policy.quota_pending != kUnlimited && policy.quota_pending != kDefaultQuota &&
      (policy.quota_pending < 0 || policy.quota_pending > kMaxQuotaPending)) {
    return InvalidArgument("quota.pending: " + std::to_string(policy.quota_pending) +
                           " (expected 0.." + std::to_string(kMaxQuotaPending) + ")");
  }
  if (policy.max_priority < kMinPriority || policy.max_priority > kMaxPriority) {
    return InvalidArgument("maxPriority: " + std::to_string(policy.max_priority) + " (expected " +
                           std::to_string(kMinPriority) + ".." + std::to_string(kMaxPriority) +
                           ")");
  }
  return Ok();
}

Status ValidateSchedulerOptions(const SchedulerOptions& options) {
  if (!(options.half_life_s >= 1 && options.half_life_s <= 365.0 * 24 * 3600)) {
    return InvalidArgument("half-life: expected 1 s .. 365 days");
  }
  if (options.max_reservations < 0 || options.max_reservations > 1024) {
    return InvalidArgument("reservations: " + std::to_string(options.max_reservations) +
                           " (expected 0..1024)");
  }
  if (options.default_quota_pending != kUnlimited &&
      (options.default_quota_pending < 0 || options.default_quota_pending > kMaxQuotaPending)) {
    return InvalidArgument(
        "default pending quota: " + std::to_string(options.default_quota_pending) +
        " (expected 0.." + std::to_string(kMaxQuotaPending) + ")");
  }
  return Ok();
}

namespace {

std::string NodeName(const placement::Fleet& fleet, int node) {
  if (node < 0 || node >= fleet.node_count()) return "node " + std::to_string(node);
  const std::string& name = fleet.node(node).name;
  return name.empty() ? "node " + std::to_string(node) : name;
}

// Whole GPUs as integers; with MIG slices in use, to three decimals.
std::string GpuCount(double gpus) {
  if (gpus == std::floor(gpus)) return std::to_string(static_cast<int64_t>(gpus));
  char text[32];
  std::snprintf(text, sizeof(text), "%.3f", gpus);
  return text;
}

}  // namespace

std::string Scheduler::Describe(const Wait& wait, const PassResult& pass,
                                const placement::Fleet& fleet,
                                const std::function<std::string(RequestId)>& label_of) const {
  auto label = [&](RequestId id) {
    auto it = pending_.find(id);
    if (it != pending_.end() && !it->second.request.label.empty()) return it->second.request.label;
    return label_of ? label_of(id) : std::to_string(id);
  };
  auto gpus_of = [&](RequestId id) {
    auto it = pending_.find(id);
    return it == pending_.end() ? 0 : it->second.request.gpus;
  };
  const Reservation* reservation =
      wait.reservation >= 0 && wait.reservation < static_cast<int>(pass.reservations.size())
          ? &pass.reservations[wait.reservation]
          : nullptr;
  switch (wait.kind) {
    case WaitKind::kNone:
      return "admitted";
    case WaitKind::kQuotaGpus:
      return "waiting: tenancy quota " + GpuCount(wait.in_use) + "/" + std::to_string(wait.quota) +
             " GPUs in use";
    case WaitKind::kReservation: {
      if (!reservation) break;
      std::string text = "waiting: next to start, " +
                         std::to_string(topology::MaskSize(reservation->gpus)) +
                         " GPUs reserved on " + NodeName(fleet, reservation->node);
      if (reservation->ready_s == kUnknownTime) return text + " (free when their work ends)";
      const double in = std::max(0.0, reservation->ready_s - now_s_);
      return text + " (free in at most " + std::to_string(static_cast<int64_t>(std::ceil(in))) +
             " s)";
    }
    case WaitKind::kReserved:
      if (!reservation) break;
      return "waiting: reserved for " + label(reservation->holder) + " (" +
             std::to_string(topology::MaskSize(reservation->gpus)) + " GPUs on " +
             NodeName(fleet, reservation->node) + ")";
    case WaitKind::kNoCapacity:
      return "waiting: no capacity: needs " + std::to_string(gpus_of(wait.id)) +
             " GPUs together, " + std::to_string(std::max(0, wait.free_gpus)) + " free";
    case WaitKind::kNeverPlaceable:
      return "waiting: no node can give " + std::to_string(gpus_of(wait.id)) + " GPUs together";
  }
  return "waiting";
}

}  // namespace tessera::scheduling

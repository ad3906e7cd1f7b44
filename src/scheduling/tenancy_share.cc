// Fair share: recent usage decayed with a half-life, the order key of a tenancy, and the usage
// report.
#include <algorithm>
#include <cmath>

#include "scheduling/scheduling.h"

namespace tessera::scheduling {

void Scheduler::Advance(double now_s) {
  if (!(now_s > now_s_)) return;
  const double dt = now_s - now_s_;
  now_s_ = now_s;
  // Exact for GPUs in use held constant over dt: U' = U d + g tau (1 - d), d = e^(-dt/tau).
  const double decay = std::exp(-dt / tau_s_);
  for (Tenancy& tenancy : tenancies_) {
    tenancy.decayed_gpu_seconds = tenancy.decayed_gpu_seconds * decay +
                                  (tenancy.in_use + tenancy.other_gpus) * tau_s_ * (1 - decay);
  }
}

void Scheduler::ChargePast(const std::string& tenancy, double gpus, double from_s, double to_s) {
  from_s = std::min(from_s, now_s_);
  to_s = std::min(to_s, now_s_);
  if (!(to_s > from_s) || gpus == 0) return;
  // What `gpus` held over [from, to] adds to the decayed integral as of now (see Advance).
  Tenancy& entry = tenancies_[TenancyIndex(tenancy)];
  const double added =
      gpus * tau_s_ * (std::exp(-(now_s_ - to_s) / tau_s_) - std::exp(-(now_s_ - from_s) / tau_s_));
  entry.decayed_gpu_seconds = std::max(0.0, entry.decayed_gpu_seconds + added);
}

void Scheduler::SetOtherUse(const std::string& tenancy, double gpus, double now_s) {
  Advance(now_s);
  tenancies_[TenancyIndex(tenancy)].other_gpus = std::max(0.0, gpus);
}

// Lower goes first. Recent usage over tau is the average number of GPUs in use over the recent
// window; GPUs in use now are added so an admission counts at once, not only as it decays in.
double Scheduler::ShareKey(const Tenancy& tenancy, double extra_gpus) const {
  const double recent = tenancy.decayed_gpu_seconds / tau_s_;
  return (recent + tenancy.in_use + tenancy.other_gpus + extra_gpus) / tenancy.policy.weight;
}

std::vector<TenancyUsage> Scheduler::Usage() const {
  std::vector<TenancyUsage> out;
  double total_recent = 0, active_weight = 0;
  for (const Tenancy& tenancy : tenancies_) {
    TenancyUsage usage;
    usage.name = tenancy.name;
    usage.weight = tenancy.policy.weight;
    usage.in_use = tenancy.in_use;
    usage.other_gpus = tenancy.other_gpus;
    usage.pending = static_cast<int>(tenancy.queue.size());
    usage.recent_gpus = tenancy.decayed_gpu_seconds / tau_s_;
    const double held = usage.in_use + usage.other_gpus;
    total_recent += usage.recent_gpus + held;
    if (held > 0 || usage.pending > 0) active_weight += usage.weight;
    out.push_back(std::move(usage));
  }
  for (TenancyUsage& usage : out) {
    const double held = usage.in_use + usage.other_gpus;
    if (total_recent > 0) usage.share = (usage.recent_gpus + held) / total_recent;
    if (active_weight > 0 && (held > 0 || usage.pending > 0))
      usage.target = usage.weight / active_weight;
  }
  return out;
}

double JainIndex(const std::vector<double>& values) {
  if (values.empty()) return 1;
  double sum = 0, squares = 0;
  for (double x : values) {
    sum += x;
    squares += x * x;
  }
  if (squares <= 0) return 1;
  return sum * sum / (static_cast<double>(values.size()) * squares);
}

}  // namespace tessera::scheduling

// Synthetic MIG fleet traces: Poisson arrivals, a mix of whole GPUs, MIG slices (skewed to small
// ones, drifting to larger ones mid-window) and shares, heavy-tailed (log-normal) durations.
#include <cmath>
#include <utility>

#include "placement/mig_fleet.h"
#include "placement/trace_text.h"

namespace tessera::placement {
namespace {

constexpr double kWholeShare = 0.15, kMigShare = 0.65;
const int kWholeSizes[] = {1, 2, 4, 8};
const std::vector<double> kWholeWeights = {50, 25, 15, 10};
struct ProfileMix {
  const char* name;
  double compute_slices;
  double small_weight;  // at the window's ends
  double large_weight;  // mid-window, with full drift
};
const ProfileMix kProfiles[] = {
    {"1g.10gb", 1, 50, 15}, {"1g.20gb", 1, 10, 5}, {"2g.20gb", 2, 20, 15},
    {"3g.40gb", 3, 10, 35}, {"4g.40gb", 4, 5, 15}, {"7g.80gb", 7, 5, 15},
};
const double kShareMemory[] = {8, 10, 16, 20, 24, 40};
const double kShareCompute[] = {0.1, 0.2, 0.25, 0.3, 0.5};

std::vector<double> ProfileWeights(double large) {
  std::vector<double> weights;
  for (const ProfileMix& p : kProfiles)
    weights.push_back((1 - large) * p.small_weight + large * p.large_weight);
  return weights;
}

double MeanSliceFraction(double large) {
  std::vector<double> weights = ProfileWeights(large);
  double sum = 0, fraction = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    sum += weights[i];
    fraction += weights[i] * kProfiles[i].compute_slices / 7;
  }
  return fraction / sum;
}

// The mean GPU fraction one request holds, over the window (the drift averages to drift/2).
double MeanFraction(double drift) {
  double whole = 0, weight_sum = 0;
  for (size_t i = 0; i < kWholeWeights.size(); ++i) {
    whole += kWholeWeights[i] * kWholeSizes[i];
    weight_sum += kWholeWeights[i];
  }
  double share = 0;
  for (double c : kShareCompute)
    share += c / std::size(kShareCompute);
  return kWholeShare * whole / weight_sum + kMigShare * MeanSliceFraction(drift / 2) +
         (1 - kWholeShare - kMigShare) * share;
}

void FillKind(TraceRng& rng, double large, MigTraceRequest& request) {
  const double kind = rng.Uniform();
  if (kind < kWholeShare) {
    request.kind = MigRequestKind::kWhole;
    request.gpus = kWholeSizes[rng.Pick(kWholeWeights)];
  } else if (kind < kWholeShare + kMigShare) {
    request.kind = MigRequestKind::kMig;
    request.profile = kProfiles[rng.Pick(ProfileWeights(large))].name;
  } else {
    request.kind = MigRequestKind::kShare;
    request.share_memory_gib = kShareMemory[rng.Next() % std::size(kShareMemory)];
    request.share_compute = kShareCompute[rng.Next() % std::size(kShareCompute)];
  }
}

}  // namespace

Result<std::vector<MigTraceRequest>> GenerateMigTrace(const MigTraceOptions& options) {
  if (!(options.hours > 0 && options.hours <= 24 * 365))
    return InvalidArgument("hours: expected (0, 8760]");
  if (options.total_gpus < 1 || options.total_gpus > 1'000'000)
    return InvalidArgument("total GPUs: expected 1..1000000");
  if (!(options.load > 0 && options.load <= 10)) return InvalidArgument("load: expected (0, 10]");
  if (options.tenancies < 1 || options.tenancies > 1000)
    return InvalidArgument("tenancies: expected 1..1000");
  if (!(options.duration_median_s > 0) || !(options.duration_sigma >= 0) ||
      options.duration_sigma > 5 || !(options.duration_cap_s >= options.duration_median_s) ||
      options.duration_cap_s > kMaxMigTraceSeconds) {
    return InvalidArgument("durations: median > 0, sigma 0..5, median <= cap <= 1e9 s");
  }
  if (!(options.drift >= 0 && options.drift <= 1)) return InvalidArgument("drift: expected 0..1");
  const double mu = std::log(options.duration_median_s), sigma = options.duration_sigma;
  const double mean_duration = std::exp(mu + sigma * sigma / 2);
  const double rate =
      options.load * options.total_gpus / (MeanFraction(options.drift) * mean_duration);
  const double window = options.hours * 3600;
  if (rate * window > static_cast<double>(kMaxMigTraceRequests))
    return InvalidArgument("more requests than a trace may hold");
  TraceRng rng(options.seed);
  std::vector<MigTraceRequest> requests;
  for (double now = -std::log(rng.Uniform()) / rate; now < window;
       now += -std::log(rng.Uniform()) / rate) {
    MigTraceRequest request;
    request.arrival_s = std::round(now * 1000) / 1000;
    request.tenancy = "t" + std::to_string(rng.Next() % options.tenancies);
    const double large = options.drift * (1 - std::cos(2 * M_PI * now / window)) / 2;
    FillKind(rng, large, request);
    double duration = std::exp(mu + sigma * rng.Normal());
    request.duration_s = std::round(std::min(duration, options.duration_cap_s) * 1000) / 1000;
    if (request.duration_s <= 0) request.duration_s = 0.001;
    requests.push_back(std::move(request));
  }
  return requests;
}

}  // namespace tessera::placement

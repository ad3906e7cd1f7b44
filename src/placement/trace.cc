// Trace files (CSV) and synthetic traces for the simulator.
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "placement/placement.h"
#include "placement/trace_text.h"

namespace tessera::placement {
namespace {

bool IsTenancyName(std::string_view name) {
  if (name.empty() || name.size() > kMaxTraceTenancyLength) return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return true;
}

}  // namespace

Result<std::vector<Request>> ParseTraceCsv(std::string_view text) {
  std::vector<Request> requests;
  size_t line_number = 0;
  bool seen_data = false;
  while (!text.empty()) {
    size_t end = text.find('\n');
    std::string_view line = TrimTraceField(text.substr(0, end));
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    ++line_number;
    if (line.empty() || line.front() == '#') continue;
    const std::string where = "line " + std::to_string(line_number);
    std::string_view fields[4];
    size_t count = 0;
    while (true) {
      size_t comma = line.find(',');
      if (count == 4)
        return InvalidArgument(where + ": more than 4 fields (arrival_s,duration_s,gpus,tenancy)");
      fields[count++] = TrimTraceField(line.substr(0, comma));
      if (comma == std::string_view::npos) break;
      line = line.substr(comma + 1);
    }
    if (count != 3 && count != 4) {
      return InvalidArgument(where + ": " + std::to_string(count) +
                             " fields, expected 3 or 4 (arrival_s,duration_s,gpus[,tenancy])");
    }
    if (!seen_data && fields[0] == "arrival_s" && fields[1] == "duration_s" &&
        fields[2] == "gpus" && (count == 3 || fields[3] == "tenancy")) {
      seen_data = true;
      continue;
    }
    seen_data = true;
    Request request;
    auto arrival = PlainDecimal(fields[0], 64);
    if (!arrival || *arrival < 0) {
      return InvalidArgument(where + ": arrival_s \"" + std::string(fields[0]) +
                             "\" is not a number >= 0");
    }
    auto duration = PlainDecimal(fields[1], 64);
    if (!duration || *duration <= 0) {
      return InvalidArgument(where + ": duration_s \"" + std::string(fields[1]) +
                             "\" is not a number > 0");
    }
    auto gpus = PlainDecimal(fields[2], 64);
    if (!gpus || *gpus < 1 || *gpus > 64 || *gpus != std::floor(*gpus)) {
      return InvalidArgument(where + ": gpus \"" + std::string(fields[2]) +
                             "\" is not a whole number 1..64");
    }
    request.arrival_s = *arrival;
    request.duration_s = *duration;
    request.gpus = static_cast<int>(*gpus);
    if (count == 4) {
      if (!IsTenancyName(fields[3])) {
        return InvalidArgument(where + ": tenancy is not 1.." +
                               std::to_string(kMaxTraceTenancyLength) +
                               " characters of a-z, 0-9 and '-'");
      }
      request.tenancy = std::string(fields[3]);
    }
    requests.push_back(std::move(request));
  }
  return requests;
}

std::string TraceToCsv(const std::vector<Request>& requests) {
  bool tenancies = false;
  for (const Request& r : requests)
    tenancies = tenancies || r.tenancy != kDefaultTenancy;
  std::string out =
      tenancies ? "arrival_s,duration_s,gpus,tenancy\n" : "arrival_s,duration_s,gpus\n";
  char line[96];
  for (const Request& r : requests) {
    std::snprintf(line, sizeof line, "%.3f,%.3f,%d", r.arrival_s, r.duration_s, r.gpus);
    out += line;
    if (tenancies) out += "," + r.tenancy;
    out += '\n';
  }
  return out;
}

Result<std::vector<Request>> SyntheticTrace(const SyntheticOptions& options) {
  if (!(options.load > 0 && options.load <= 100)) {
    return InvalidArgument("load: " + std::to_string(options.load) + " (expected > 0)");
  }
  if (options.total_gpus < 1) return InvalidArgument("fleet has no GPUs");
  if (options.requests < 0 || options.requests > 100000000) {
    return InvalidArgument("requests: " + std::to_string(options.requests) +
                           " (expected 0..100000000)");
  }
  if (!(options.duration_median_s > 0) || !(options.duration_sigma >= 0) ||
      options.duration_sigma > 10) {
    return InvalidArgument("durations: median must be > 0 s and sigma within 0..10");
  }
  double weight_sum = 0, mean_gpus = 0;
  for (const auto& [size, weight] : options.size_weights) {
    if (size < 1 || size > 64 || !(weight >= 0)) {
      return InvalidArgument("size weights: sizes must be 1..64 and weights >= 0");
    }
    weight_sum += weight;
    mean_gpus += size * weight;
  }
  if (!(weight_sum > 0)) return InvalidArgument("size weights: all zero");
  mean_gpus /= weight_sum;
  const double mu = std::log(options.duration_median_s);
  const double sigma = options.duration_sigma;
  const double mean_duration = std::exp(mu + sigma * sigma / 2);
  // Offered load = rate * E[gpus] * E[duration] / GPUs.
  const double rate = options.load * options.total_gpus / (mean_gpus * mean_duration);

  TraceRng rng(options.seed);
  std::vector<Request> requests;
  requests.reserve(options.requests);
  double now = 0;
  for (int i = 0; i < options.requests; ++i) {
    now += rng.Exponential(rate);
    Request request;
    request.arrival_s = now;
    request.duration_s = std::exp(mu + sigma * rng.Normal());
    double pick = rng.Uniform() * weight_sum;
    request.gpus = options.size_weights.back().first;
    for (const auto& [size, weight] : options.size_weights) {
      if (pick < weight) {
        request.gpus = size;
        break;
      }
      pick -= weight;
    }
    requests.push_back(request);
  }
  return requests;
}

}  // namespace tessera::placement

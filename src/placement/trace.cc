// Trace files (CSV) and synthetic traces for the simulator.
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "placement/placement.h"

namespace tessera::placement {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

// Plain decimal numbers only: strtod alone would also take "nan", "inf" and hex floats.
std::optional<double> Number(std::string_view text) {
  if (text.empty() || text.size() > 64) return std::nullopt;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-')) {
      return std::nullopt;
    }
  }
  std::string copy(text);
  char* end = nullptr;
  double value = std::strtod(copy.c_str(), &end);
  if (end != copy.c_str() + copy.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

bool IsTenancyName(std::string_view name) {
  if (name.empty() || name.size() > kMaxTraceTenancyLength) return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return true;
}

// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, and the same sequence everywhere.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in (0, 1): never 0, so log() is safe.
  double Uniform() { return (static_cast<double>(Next() >> 11) + 0.5) * 0x1.0p-53; }
  double Exponential(double rate) { return -std::log(Uniform()) / rate; }
  // Box-Muller; the second value is dropped to keep one draw per call.
  double Normal() {
    double u1 = Uniform(), u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  }

 private:
  uint64_t state_;
};

}  // namespace

Result<std::vector<Request>> ParseTraceCsv(std::string_view text) {
  std::vector<Request> requests;
  size_t line_number = 0;
  bool seen_data = false;
  while (!text.empty()) {
    size_t end = text.find('\n');
    std::string_view line = Trim(text.substr(0, end));
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
      fields[count++] = Trim(line.substr(0, comma));
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
    auto arrival = Number(fields[0]);
    if (!arrival || *arrival < 0) {
      return InvalidArgument(where + ": arrival_s \"" + std::string(fields[0]) +
                             "\" is not a number >= 0");
    }
    auto duration = Number(fields[1]);
    if (!duration || *duration <= 0) {
      return InvalidArgument(where + ": duration_s \"" + std::string(fields[1]) +
                             "\" is not a number > 0");
    }
    auto gpus = Number(fields[2]);
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

  Rng rng(options.seed);
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

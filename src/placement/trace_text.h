// What the fleet trace and the MIG trace share (internal to placement): trimming a field, plain
// decimal numbers, and the seeded generator their synthetic traces draw from.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace tessera::placement {

// `s` without leading blanks and trailing blanks or a carriage return.
std::string_view TrimTraceField(std::string_view s);

// A plain decimal number of at most `max_length` characters: strtod alone would also take "nan",
// "inf" and hex floats. nullopt for anything else, and for a value that is not finite.
std::optional<double> PlainDecimal(std::string_view text, size_t max_length);

// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, and the same sequence everywhere.
class TraceRng {
 public:
  explicit TraceRng(uint64_t seed) : state_(seed) {}
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
  // An index into `weights` with probability proportional to its weight.
  size_t Pick(const std::vector<double>& weights);

 private:
  uint64_t state_;
};

}  // namespace tessera::placement

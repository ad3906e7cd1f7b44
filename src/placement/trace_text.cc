#include "placement/trace_text.h"

#include <cstdlib>
#include <string>

namespace tessera::placement {

std::string_view TrimTraceField(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

std::optional<double> PlainDecimal(std::string_view text, size_t max_length) {
  if (text.empty() || text.size() > max_length) return std::nullopt;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-'))
      return std::nullopt;
  }
  std::string copy(text);
  char* end = nullptr;
  double value = std::strtod(copy.c_str(), &end);
  if (end != copy.c_str() + copy.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

size_t TraceRng::Pick(const std::vector<double>& weights) {
  double sum = 0;
  for (double w : weights)
    sum += w;
  double pick = Uniform() * sum;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (pick < weights[i]) return i;
    pick -= weights[i];
  }
  return weights.size() - 1;
}

}  // namespace tessera::placement

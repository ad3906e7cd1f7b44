// Memory quantities: the Kubernetes spelling ("20Gi", "1.5Gi", "16G"), strictly.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "common/untrusted_text.h"
#include "sharing/sharing.h"

namespace tessera::sharing {
namespace {

struct Suffix {
  std::string_view text;
  uint64_t multiplier;
};

// Longest first, so "Gi" is tried before "G".
constexpr std::array<Suffix, 8> kSuffixes = {{{"Ki", uint64_t{1} << 10},
                                              {"Mi", uint64_t{1} << 20},
                                              {"Gi", uint64_t{1} << 30},
                                              {"Ti", uint64_t{1} << 40},
                                              {"k", 1000},
                                              {"M", 1000 * 1000},
                                              {"G", 1000 * 1000 * 1000},
                                              {"T", uint64_t{1000} * 1000 * 1000 * 1000}}};

bool IsDigit(char c) {
  return c >= '0' && c <= '9';
}

Error Bad(std::string_view text, std::string_view why) {
  return InvalidArgument(fmt::format("memory \"{}\": {}", Excerpt(text, 40), why));
}

}  // namespace

Result<uint64_t> ParseMemory(std::string_view text) {
  if (text.empty()) return InvalidArgument("memory: empty (want a quantity such as \"20Gi\")");
  if (text.size() > 24) return Bad(text, "too long");
  uint64_t multiplier = 1;
  std::string_view number = text;
  for (const Suffix& suffix : kSuffixes) {
    if (number.size() > suffix.text.size() && number.ends_with(suffix.text)) {
      multiplier = suffix.multiplier;
      number.remove_suffix(suffix.text.size());
      break;
    }
  }
  // Digits, optionally '.', then one to three fraction digits: no sign, exponent or spaces.
  const size_t dot = number.find('.');
  std::string_view whole = number.substr(0, dot);
  std::string_view fraction = dot == std::string_view::npos ? "" : number.substr(dot + 1);
  if (whole.empty() || whole.size() > 16 || !std::all_of(whole.begin(), whole.end(), IsDigit) ||
      (dot != std::string_view::npos &&
       (fraction.empty() || fraction.size() > 3 ||
        !std::all_of(fraction.begin(), fraction.end(), IsDigit)))) {
    return Bad(text,
               "want digits (up to three decimals) and Ki, Mi, Gi, Ti, k, M, G or T, as in 20Gi");
  }
  if (whole.size() > 1 && whole[0] == '0') return Bad(text, "a leading zero");
  if (!fraction.empty() && multiplier == 1) return Bad(text, "a fraction of a byte");
  uint64_t integer = 0;
  for (char c : whole)
    integer = integer * 10 + static_cast<uint64_t>(c - '0');
  uint64_t thousandths = 0;
  for (size_t i = 0; i < 3; ++i)
    thousandths =
        thousandths * 10 + (i < fraction.size() ? static_cast<uint64_t>(fraction[i] - '0') : 0);
  // Both parts are bounded (16 digits, 3 digits) and the multiplier by 2^40: compare against the
  // limit before multiplying, so nothing wraps.
  constexpr uint64_t kLimit = kMaxShareMemory;
  if (integer > kLimit / multiplier) return Bad(text, "more than 4Ti");
  uint64_t bytes = integer * multiplier;
  const uint64_t part = thousandths * (multiplier / 1000) +
                        (multiplier % 1000 ? thousandths * (multiplier % 1000) / 1000 : 0);
  if (bytes > kLimit - part) return Bad(text, "more than 4Ti");
  bytes += part;
  if (bytes < kMinShareMemory) return Bad(text, "less than 256Mi");
  return bytes;
}

std::string FormatMemory(uint64_t bytes) {
  for (const char* unit : {"Ti", "Gi", "Mi", "Ki"}) {
    const uint64_t size = unit[0] == 'T'   ? uint64_t{1} << 40
                          : unit[0] == 'G' ? uint64_t{1} << 30
                          : unit[0] == 'M' ? uint64_t{1} << 20
                                           : uint64_t{1} << 10;
    if (bytes != 0 && bytes % size == 0) return fmt::format("{}{}", bytes / size, unit);
  }
  return std::to_string(bytes);
}

std::string FormatGiB(uint64_t bytes) {
  const double gib = static_cast<double>(bytes) / static_cast<double>(kGiB);
  const double tenths = std::round(gib * 10.0);
  if (std::fmod(tenths, 10.0) == 0.0) return fmt::format("{:.0f} GiB", tenths / 10.0);
  return fmt::format("{:.1f} GiB", tenths / 10.0);
}

}  // namespace tessera::sharing

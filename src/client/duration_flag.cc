// Durations typed on the command line (duration_flag.h).
#include "client/duration_flag.h"

#include <string>

#include "common/untrusted_text.h"

namespace tessera::client {
namespace {

int64_t UnitSeconds(char unit) {
  switch (unit) {
    case 's':
      return 1;
    case 'm':
      return 60;
    case 'h':
      return 3600;
    case 'd':
      return 86400;
    case 'w':
      return 7 * 86400;
    default:
      return 0;
  }
}

}  // namespace

Result<int64_t> ParseDurationFlag(std::string_view text, std::string_view flag) {
  auto bad = [&](const std::string& why) {
    return InvalidArgument(std::string(flag) + " " + Excerpt(text, 40) + ": " + why);
  };
  const std::string shape = "want whole numbers with units s, m, h, d or w, such as 30d or 1h30m";
  if (text.empty()) return bad(shape);
  int64_t total = 0;
  size_t at = 0;
  while (at < text.size()) {
    int64_t number = 0;
    size_t digits = 0;
    for (; at < text.size() && text[at] >= '0' && text[at] <= '9'; ++at, ++digits) {
      // Twelve digits of any unit are already past the bound: stop before int64_t could wrap.
      if (digits == 12) return bad("longer than 100 years");
      number = number * 10 + (text[at] - '0');
    }
    if (digits == 0 || at == text.size()) return bad(shape);
    const int64_t unit = UnitSeconds(text[at++]);
    if (unit == 0) return bad(shape);
    total += number * unit;
    if (total > kMaxDurationFlagSeconds) return bad("longer than 100 years");
  }
  if (total == 0) return bad("must be longer than 0");
  return total;
}

}  // namespace tessera::client

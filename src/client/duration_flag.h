// Durations typed on the command line (`tessera token create --expires 30d`, `tessera audit
// --since 24h`): whole numbers each followed by a unit, s, m, h, d or w, added up ("1h30m").
// Pure.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/error.h"

namespace tessera::client {

// Past a hundred years a duration is a typo, and the sum stays far from int64_t's end.
inline constexpr int64_t kMaxDurationFlagSeconds = int64_t{100} * 366 * 86400;

// Seconds, more than 0 and at most kMaxDurationFlagSeconds; InvalidArgument naming `flag` and an
// excerpt of the text otherwise (a bare number too: "30" could mean any unit).
Result<int64_t> ParseDurationFlag(std::string_view text, std::string_view flag);

}  // namespace tessera::client

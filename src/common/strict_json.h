// JSON from outside (a tenant, an operator's file, a stored record) read one way everywhere:
// nesting bounded before parsing, duplicate keys refused (nlohmann silently keeps the last of
// them, so a body could say two things and be read as one), and whole numbers checked against
// their range before any conversion (nlohmann keeps values from 2^63 up as unsigned, and
// get<int64_t>() wraps them to negative numbers).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "common/error.h"

namespace tessera {

// Parses `text`: InvalidArgument naming `what` when it nests deeper than kMaxJsonDepth, is not
// JSON, or repeats a key inside one object ("body: duplicate key \"gpus\"").
Result<nlohmann::json> ParseStrictJson(std::string_view text, std::string_view what = "body");

// The value as a signed 64-bit integer when it is a whole number that fits (an unsigned one at
// most INT64_MAX); nullopt for anything else (floats, 2^63 and above, non-numbers).
std::optional<int64_t> JsonInt64(const nlohmann::json& value);

// A whole number in [low, high], else InvalidArgument "<field>: must be a whole number from
// <low> to <high>" (the value itself is never quoted beyond a short excerpt).
Result<int64_t> JsonIntInRange(const nlohmann::json& value, const std::string& field, int64_t low,
                               int64_t high);

}  // namespace tessera

// Handling text that came from outside (a tenant, a network peer) before and after parsing it:
// bounded nesting for JSON, and a short, printable excerpt for error messages so that nothing a
// caller sent is echoed back whole. Pure functions: bytes in, values out.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/error.h"

namespace tessera {

// How deep a JSON document from outside may nest. nlohmann's parser copes with any depth, but
// its dump() and every recursive walk over the value do not: 90,000 levels crash the process.
inline constexpr int kMaxJsonDepth = 32;

// Checks that `text` (JSON, possibly invalid) nests arrays and objects at most `max_depth`
// levels deep. The error names where the limit was crossed ("volumes[0].name: nested deeper
// than 32 levels"), the path starting with `what` when the top level itself is too deep.
// Linear, no recursion, and no allocation beyond the path of the first max_depth levels.
Status CheckJsonNesting(std::string_view text, std::string_view what = "body",
                        int max_depth = kMaxJsonDepth);

// At most `max_bytes` of `text` fit for an error message or a log line: bytes outside printable
// ASCII become '?', and "..." marks a cut.
std::string Excerpt(std::string_view text, size_t max_bytes = 60);

}  // namespace tessera

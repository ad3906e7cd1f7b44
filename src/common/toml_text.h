// Text made safe for toml++ before parsing a TOML file from outside.
#pragma once

#include <string>
#include <string_view>

namespace tessera {

// toml++ 3.3.0 (Debian 12) reaches __builtin_unreachable() in its generated Unicode tables for
// some code points outside strings (found by fuzz_containerd_config: "o" U+2EFF). Readers of
// containerd configs need only ASCII keys and values, so every non-ASCII sequence becomes '?':
// inside strings and comments that keeps the document valid, outside them it was invalid TOML
// anyway. A leading byte-order mark is dropped.
std::string AsciiForToml(std::string_view text);

}  // namespace tessera

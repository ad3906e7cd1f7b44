// The canonical PCI address every module exchanges: sysfs's "dddd:bb:dd.f", lowercase hex.
#pragma once

#include <string_view>

namespace tessera {

// "0000:18:00.0" → true; upper case, a short domain or a function above 7 → false.
bool IsPciAddress(std::string_view text);

}  // namespace tessera

// Fuzzes the CDI spec parser and validator with arbitrary JSON/YAML text. A spec that parses
// and validates must survive a round trip through both encodings unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "cdi/cdi.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = tessera::cdi::ParseSpec(text);
  auto problems = tessera::cdi::ValidateSpec(parsed.spec);
  if (!parsed.problems.empty() || !problems.empty()) return 0;
  for (const auto& encoded :
       {tessera::cdi::ToJson(parsed.spec), tessera::cdi::ToYaml(parsed.spec)}) {
    auto again = tessera::cdi::ParseSpec(encoded);
    if (!again.problems.empty() || !(again.spec == parsed.spec)) std::abort();
  }
  return 0;
}

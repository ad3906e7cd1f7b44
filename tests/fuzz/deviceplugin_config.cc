// The device plugin's YAML config: any input either parses into a config that validates, or is
// refused with an error; never a crash or an uncaught exception.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "deviceplugin/deviceplugin.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto config = tessera::deviceplugin::ParseConfig(text);
  if (!config) {
    if (config.error().message.empty()) __builtin_trap();
    return 0;
  }
  if (!tessera::deviceplugin::ValidateConfig(*config).ok()) __builtin_trap();
  for (const auto& shared : config->sharing.resources) {
    if (shared.replicas < 2) __builtin_trap();
  }
  return 0;
}

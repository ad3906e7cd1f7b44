// Fuzzes the containerd config checker (toml++ parse + checks) with arbitrary text. Every
// outcome must be a verdict: a parse failure is one FAIL check, never a crash or an exception.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "runtimes/runtimes.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::runtimes;
  ContainerdCheckInput input;
  input.config_path = "fuzz.toml";
  input.config_text.assign(reinterpret_cast<const char*>(data), size);
  input.containerd_version = Version::Parse(size % 2 ? "1.7.20" : "1.6.9");
  input.cdi_specs_present = size % 3 == 0;
  // The runsc.toml lookup gets the same bytes, so nvproxy parsing is fuzzed too.
  input.read_file = [&](const std::string&) -> std::optional<std::string> {
    return input.config_text;
  };
  auto result = CheckContainerdConfig(input);
  if (result.checks.empty()) std::abort();
  if (!result.facts && (result.checks.size() != 1 || result.checks[0].verdict != Verdict::kFail))
    std::abort();
  DoctorReport report{result.checks};
  (void)ToJson(report);
  (void)ToTable(report);
  return 0;
}

// The MIG capability tree of /proc/driver/nvidia/capabilities/gpu<N>/mig as the inventory hands
// it to the parser: NUL-separated pairs of relative path and file content.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "inventory/parsers.h"

using namespace tessera::inventory;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  std::vector<MigCapabilityFile> files;
  while (!input.empty() && files.size() < 512) {
    auto cut = input.find('\0');
    std::string_view path = input.substr(0, cut);
    input = cut == std::string_view::npos ? std::string_view() : input.substr(cut + 1);
    cut = input.find('\0');
    std::string_view content = input.substr(0, cut);
    input = cut == std::string_view::npos ? std::string_view() : input.substr(cut + 1);
    (void)ParseMigInstanceName(path, "gi");
    files.push_back({std::string(path), std::string(content)});
  }
  std::vector<std::string> warnings;
  auto minors = ParseMigCapabilities(files, warnings);
  // Every result pairs a compute instance with a GPU instance file that was given.
  for (const auto& entry : minors) {
    if (entry.gpu_instance_id > 1023 || entry.compute_instance_id > 1023) __builtin_trap();
  }
  return 0;
}

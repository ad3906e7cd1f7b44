// Device strings (and image references) from outside input: parsing never crashes, whatever
// parses formats back to an equal value, and every HCS document it yields is valid JSON.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "windows/windows.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::windows;
  std::string text(reinterpret_cast<const char*>(data), size);
  auto ref = ParseDeviceString(text);
  if (ref.ok()) {
    auto again = ParseDeviceString(FormatDeviceString(*ref));
    if (!again.ok() || !(*again == *ref)) std::abort();
    for (SchemaVersion schema : {SchemaVersion{0, 0}, SchemaVersion{2, 1}, SchemaVersion{2, 7}}) {
      for (Isolation iso : {Isolation::kProcess, Isolation::kHyperV}) {
        auto doc = HcsDeviceJson(*ref, schema, iso);
        if (doc.ok() && nlohmann::json::parse(*doc, nullptr, false).is_discarded()) std::abort();
      }
    }
  }
  auto image = ParseImageReference(text);
  if (image.ok()) {
    CheckCompatibility({20348, *image, Isolation::kProcess, true});
  }
  (void)ParseVendorFile(text);
  (void)ParseLuid(text);
  return 0;
}

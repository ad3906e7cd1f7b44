// Every text parser of /proc and /sys files; the first byte picks which one.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "inventory/parsers.h"

using namespace tessera::inventory;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 8) {
    case 0:
      (void)ParseHexAttribute(text, 24);
      break;
    case 1:
      (void)ParseIntAttribute(text);
      break;
    case 2:
      (void)ParseDevNumbers(text);
      break;
    case 3:
      (void)ParseResourceFile(text);
      break;
    case 4:
      (void)ParseProcDevices(text);
      break;
    case 5:
      (void)ParseNvidiaGpuInformation(text);
      break;
    case 6:
      (void)ParseNvidiaDriverVersion(text);
      break;
    case 7:
      (void)ParseNvidiaCapabilityMinor(text);
      break;
  }
  (void)IsPciAddress(text);
  return 0;
}

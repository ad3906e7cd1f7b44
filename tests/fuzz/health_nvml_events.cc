// NVML event records as nvmlEventSetWait_v2 leaves them (nvmlEventData_t's bytes) through the
// decoder to the Signal the watcher hands to its sink, and the rest of the input as a sysfs AER
// counter file. Whatever the bytes: a Xid event becomes a kXid signal carrying that Xid and the
// instance IDs as NVML gave them, a double-bit ECC event a kDoubleBitEcc signal, any other type
// nothing; the handle is never dereferenced; every signal names its kind.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "health/health.h"
#include "health/watch/signals.h"
#include "nvml/nvml.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace h = tessera::health;
  namespace nvml = tessera::nvml;
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const std::string pci = "0000:9d:00.0";
  size_t at = 0;
  for (; at + nvml::kEventDataBytes <= bytes.size() && at < 64 * nvml::kEventDataBytes;
       at += nvml::kEventDataBytes) {
    auto event = nvml::DecodeEventData(bytes.substr(at));
    if (!event) std::abort();  // a whole record always decodes
    auto signal = h::EventSignal(*event, pci, 1);
    const bool xid = (event->type & nvml::kEventXidCriticalError) != 0;
    const bool ecc = (event->type & nvml::kEventDoubleBitEccError) != 0;
    if (!xid && !ecc) {
      if (signal) std::abort();
      continue;
    }
    if (!signal || signal->gpu != pci) std::abort();
    if (xid && (signal->kind != h::SignalKind::kXid || signal->xid != event->data)) std::abort();
    if (!xid && signal->kind != h::SignalKind::kDoubleBitEcc) std::abort();
    if (signal->gpu_instance_id != event->gpu_instance_id ||
        signal->compute_instance_id != event->compute_instance_id)
      std::abort();
    if (std::string_view(h::SignalKindName(signal->kind)).empty()) std::abort();
  }
  // A cut record is no event.
  if (nvml::DecodeEventData(bytes.substr(at, nvml::kEventDataBytes - 1))) std::abort();
  std::string_view text = bytes.substr(at);
  auto fatal = h::AerCount(text, "TOTAL_ERR_FATAL");
  if (fatal && text.find("TOTAL_ERR_FATAL ") == std::string_view::npos) std::abort();
  return 0;
}

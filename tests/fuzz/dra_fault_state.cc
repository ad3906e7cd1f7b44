// The DRA plugin's GPU fault state file: parsed records name canonical PCI addresses, keep the
// bounds (history, texts), carry a taint when out of service, and serialize to a file that
// parses back to the same records.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "dra/fault_state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto state = tessera::dra::ParseFaultState(text);
  if (!state) {
    if (state.error().message.empty()) __builtin_trap();
    return 0;
  }
  if (state->size() > tessera::dra::kMaxFaultStateGpus) __builtin_trap();
  for (const auto& item : *state) {
    const std::string& pci = item.first;
    const tessera::dra::FaultRecord& record = item.second;
    if (pci.size() != 12 || pci[4] != ':' || pci[7] != ':' || pci[10] != '.') __builtin_trap();
    if (record.health.history.size() > tessera::health::kMaxHistory) __builtin_trap();
    if (record.health.reason.size() > tessera::dra::kMaxFaultStateText) __builtin_trap();
    if (!record.health.in_service() && record.taint.value.empty()) __builtin_trap();
  }
  auto again = tessera::dra::ParseFaultState(tessera::dra::SerializeFaultState(*state));
  if (!again || *again != *state) __builtin_trap();
  return 0;
}

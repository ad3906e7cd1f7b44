// Inventory JSON snapshots (FromJson), which downstream tools accept from files.
#include <cstddef>
#include <cstdint>
#include <string>

#include "inventory/inventory.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  auto inventory = tessera::inventory::FromJson(text);
  if (inventory) {
    // Whatever parses must serialise and parse again to the same value.
    std::string again = tessera::inventory::ToJson(*inventory);
    auto second = tessera::inventory::FromJson(again);
    if (!second || tessera::inventory::ToJson(*second) != again) __builtin_trap();
  }
  return 0;
}

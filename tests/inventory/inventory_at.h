// Reading the inventory of a host tree in tests.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "inventory/inventory.h"

namespace tessera::inventory {

// The inventory of the host tree at `root` (default options otherwise); an empty inventory, and a
// failed expectation, when it cannot be read.
inline Inventory InventoryAt(const std::string& root) {
  ReadOptions options;
  options.root = root;
  auto inventory = ReadInventory(options);
  EXPECT_TRUE(inventory.ok());
  return inventory.ok() ? *inventory : Inventory{};
}

}  // namespace tessera::inventory

#pragma once
// The DRA description of the HGX H100 fixture host (eight GPUs, NVSwitches), as the driver and
// prepare tests start from it.
#include "dra/dra.h"
#include "inventory/inventory.h"
#include "support/fixture_host.h"

namespace tessera::testing {

inline Result<dra::NodeDevices> DescribeHgxNode() {
  inventory::ReadOptions options;
  options.root = tessera::testing::MaterializeHost("hgx-h100-dgx");
  auto inventory = inventory::ReadInventory(options);
  if (!inventory.ok()) return inventory.error();
  return dra::DescribeNode(*inventory, {});
}

}  // namespace tessera::testing

// Windows host snapshots from outside input: parsing never crashes, what parses serializes back
// to an equal snapshot, and everything downstream of a parsed snapshot runs without crashing.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "windows/windows.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::windows;
  std::string text(reinterpret_cast<const char*>(data), size);
  auto snapshot = ParseSnapshot(text);
  if (!snapshot.ok()) return 0;
  auto again = ParseSnapshot(SnapshotToJson(*snapshot));
  if (!again.ok() || !(*again == *snapshot)) std::abort();
  if (nlohmann::json::parse(InventoryJson(*snapshot), nullptr, false).is_discarded()) std::abort();
  for (MountFormat format :
       {MountFormat::kCtr, MountFormat::kNerdctl, MountFormat::kDocker, MountFormat::kJson}) {
    MountsOptions options;
    options.format = format;
    options.selection.all = true;
    auto plan = PlanMounts(*snapshot, options);
    if (!plan.ok()) continue;
    for (const FileMount& m : plan->files.mounts) {
      if (m.source.find("\\..\\") != std::string::npos || !m.read_only) std::abort();
    }
    if (nlohmann::json::parse(MountsPlanJson(*snapshot, *plan), nullptr, false).is_discarded()) {
      std::abort();
    }
  }
  auto inventory = BuildPluginInventory(*snapshot, 2);
  if (inventory.ok()) {
    std::vector<std::string> ids;
    for (const PluginResource& r : inventory->resources) {
      for (const PluginDevice& d : r.devices) ids.push_back(d.id);
    }
    auto allocation = Allocate(*snapshot, *inventory, ids, DefaultVendorFiles());
    if (!allocation.ok()) std::abort();
  }
  return 0;
}

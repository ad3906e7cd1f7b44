// What operators and files hand the fabric-manager code: the first byte picks a fabricmanager.cfg
// (doctor --fabricmanager-config), a fabric-manager address (--fabric-manager) or the ledger file
// (<data-dir>/fabric-partitions.json, read at every start).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fabricmanager/operator_tools.h"

namespace {

using namespace tessera;
using namespace tessera::fabricmanager;

std::shared_ptr<const topology::PartitionPlanner> Planner() {
  static const auto planner = [] {
    topology::PartitionTable table = topology::HgxH100Table();
    for (int m = 1; m <= 8; ++m)
      table.pci_addresses[m] = "0000:1" + std::to_string(m) + ":00.0";
    return *topology::PartitionPlanner::Create(table);
  }();
  return planner;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 3) {
    case 0: {
      auto config = ParseFabricManagerConfig(text);
      if (!config) return 0;
      // A parsed setting never carries what the parser strips.
      for (const auto& [key, value] : *config)
        if (key.empty() || value.find('\n') != std::string::npos) __builtin_trap();
      FabricDoctorInput input;
      input.fm_address = "192.168.122.2";
      input.config = std::move(config);
      if (FabricChecks(input).size() != 1) __builtin_trap();
      break;
    }
    case 1: {
      auto address = ParseFabricAddress(text);
      if (!address) return 0;
      // What it prints reads back the same.
      auto again = ParseFabricAddress(address->ToString());
      if (!again || !(*again == *address)) __builtin_trap();
      if (address->ToString().size() >= 256 + 5) __builtin_trap();
      break;
    }
    default: {
      auto ids = LedgerPartitionIds(text);
      auto ledger = PartitionLedger::Parse(text, Planner());
      if (!ledger) return 0;
      if (!ids) __builtin_trap();  // what the strict reader takes, the bare one does too
      auto again = PartitionLedger::Parse(ledger->ToJson(), Planner());
      if (!again || again->holders() != ledger->holders()) __builtin_trap();
      auto plan = PlanReconcile(*ledger, *ids, [](const std::string& h) { return h.size() % 2; });
      (void)plan;
      break;
    }
  }
  return 0;
}

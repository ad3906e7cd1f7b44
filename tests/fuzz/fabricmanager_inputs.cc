// What operators, files and the fabric manager hand the fabric-manager code: the first byte picks
// a fabricmanager.cfg (doctor --fabricmanager-config), a fabric-manager address (--fabric-manager),
// the ledger file (<data-dir>/fabric-partitions.json, read at every start) or, from 0xf0 on, the
// partition list a fabric manager answers (any IDs, modules and bus IDs).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string_view>
#include <vector>

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

// A partition list from bytes: per partition an ID byte, a GPU count byte, then per GPU a module
// byte and a bus ID length byte with that many bytes.
std::vector<SupportedPartition> Listing(std::string_view bytes) {
  std::vector<SupportedPartition> out;
  size_t i = 0;
  auto next = [&]() -> int { return i < bytes.size() ? static_cast<uint8_t>(bytes[i++]) : -1; };
  while (i < bytes.size() && out.size() < 80) {
    SupportedPartition partition;
    partition.id = static_cast<uint32_t>(next());
    const int gpus = next() % 20;
    for (int g = 0; g < gpus && i < bytes.size(); ++g) {
      PartitionGpu gpu;
      gpu.module_id = next() - 8;  // negative, 0 and past 16 too
      const size_t length = static_cast<size_t>(std::max(0, next() % 24));
      gpu.pci_address = std::string(bytes.substr(std::min(i, bytes.size()), length));
      i += length;
      partition.gpus.push_back(std::move(gpu));
    }
    out.push_back(std::move(partition));
  }
  return out;
}

void CheckListing(std::string_view bytes) {
  const auto partitions = Listing(bytes);
  const auto defects = ListingDefects(partitions, 8);
  if (defects.size() > 17) __builtin_trap();  // bounded, whatever the list
  for (const auto& defect : defects) {
    for (unsigned char c : defect)
      if (c < 0x20 || c >= 0x7f) __builtin_trap();  // fabric-manager text only as an excerpt
  }
  // What the check lets through, serve builds its table from.
  if (ValidateListing(partitions).ok() && !TableFromPartitions(partitions, "fuzz").ok()) {
    // Only bus IDs that disagree between partitions remain for the table to refuse.
    bool conflicting = false;
    std::map<int, std::string> seen;
    for (const auto& p : partitions)
      for (const auto& gpu : p.gpus)
        if (!gpu.pci_address.empty()) {
          auto [it, fresh] = seen.emplace(gpu.module_id, gpu.pci_address);
          conflicting |= !fresh && it->second != gpu.pci_address;
        }
    if (!conflicting) __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  if (data[0] >= 0xf0) {
    CheckListing(text);
    return 0;
  }
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

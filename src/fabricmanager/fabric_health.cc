// Which GPUs a fabric manager's failed NVLinks touch (pure; the rule is in fabric_health.h).
#include "fabricmanager/fabric_health.h"

#include <algorithm>
#include <map>

namespace tessera::fabricmanager {
namespace {

constexpr size_t kNamedPorts = 8;

// " ports 12,13", " port 4", " ports 0,1,2,3,4,5,6,7 and 3 more"; empty without ports.
std::string PortText(const std::vector<uint32_t>& ports) {
  if (ports.empty()) return "";
  std::string out = ports.size() == 1 ? " port " : " ports ";
  for (size_t i = 0; i < ports.size() && i < kNamedPorts; ++i)
    out += (i ? "," : "") + std::to_string(ports[i]);
  if (ports.size() > kNamedPorts)
    out += " and " + std::to_string(ports.size() - kNamedPorts) + " more";
  return out;
}

// "NVSwitch 0000:05:00.0 ports 12,13"
std::string DeviceText(const char* what, const NvlinkFailedDevice& device) {
  std::string name = device.pci_address;
  if (name.empty()) name = device.uuid.empty() ? "(no bus ID)" : device.uuid.substr(0, 80);
  return std::string(what) + " " + name + PortText(device.ports);
}

// The board as the rule needs it: module of each GPU, the modules that route over NVSwitches,
// and the active partition of each module.
struct BoardView {
  std::map<std::string, int> module_of;  // PCI address -> module
  std::set<int> switched;                // modules of a partition of two or more GPUs
  std::map<int, uint32_t> active_of;     // module -> its active partition

  BoardView(const topology::PartitionTable& table, const std::vector<uint32_t>& active) {
    for (const auto& [module, address] : table.pci_addresses)
      module_of.emplace(address, module);
    for (const auto& partition : table.partitions) {
      if (partition.modules.size() >= 2)
        switched.insert(partition.modules.begin(), partition.modules.end());
      if (std::find(active.begin(), active.end(), partition.id) == active.end()) continue;
      for (int module : partition.modules)
        active_of.emplace(module, partition.id);
    }
  }

  std::string PartitionOf(int module) const {
    auto it = active_of.find(module);
    return it == active_of.end() ? "no active partition"
                                 : "partition " + std::to_string(it->second);
  }
};

FabricFault Fault(const BoardView& board, const std::string& gpu, int module,
                  const std::string& failed, int64_t now_ms) {
  FabricFault fault;
  fault.signal.kind = health::SignalKind::kFabricFatal;
  fault.signal.gpu = gpu;
  fault.signal.at_ms = now_ms;
  fault.signal.detail = board.PartitionOf(module) + ": " + failed;
  if (fault.signal.detail.size() > kMaxFaultDetail) {
    fault.signal.detail.resize(kMaxFaultDetail - 3);
    fault.signal.detail += "...";
  }
  fault.key = gpu + " <- " + failed;
  return fault;
}

}  // namespace

FabricFaultList FabricFaults(const NvlinkFailedDevices& failed,
                             const topology::PartitionTable& table,
                             const std::vector<uint32_t>& active, int64_t now_ms) {
  const BoardView board(table, active);
  FabricFaultList out;
  for (const auto& device : failed.gpus) {
    const std::string text = DeviceText("GPU", device);
    auto it = board.module_of.find(device.pci_address);
    if (device.pci_address.empty() || it == board.module_of.end()) {
      out.unplaced.push_back(text.substr(0, kMaxFaultDetail));
      continue;
    }
    out.faults.push_back(Fault(board, it->first, it->second, text, now_ms));
  }
  for (const auto& device : failed.switches) {
    const std::string text = DeviceText("NVSwitch", device);
    for (const auto& [address, module] : board.module_of) {
      if (board.switched.count(module) == 0) continue;
      out.faults.push_back(Fault(board, address, module, text, now_ms));
    }
  }
  std::sort(out.faults.begin(), out.faults.end(), [](const FabricFault& a, const FabricFault& b) {
    return std::tie(a.signal.gpu, a.key) < std::tie(b.signal.gpu, b.key);
  });
  out.faults.erase(
      std::unique(out.faults.begin(), out.faults.end(),
                  [](const FabricFault& a, const FabricFault& b) { return a.key == b.key; }),
      out.faults.end());
  return out;
}

}  // namespace tessera::fabricmanager

// The partition table model: validation, the built-in presets, JSON output.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "common/pci_address.h"
#include "topology/topology.h"

namespace tessera::topology {

const FabricPartition* PartitionTable::Find(uint32_t id) const {
  for (const auto& partition : partitions) {
    if (partition.id == id) return &partition;
  }
  return nullptr;
}

namespace {

std::string SetString(const std::vector<int>& modules) {
  std::string out = "{";
  for (size_t i = 0; i < modules.size(); ++i) {
    if (i) out += ",";
    out += std::to_string(modules[i]);
  }
  return out + "}";
}

}  // namespace

Status ValidatePartitionTable(const PartitionTable& table) {
  if (table.board.size() > 64 || !std::all_of(table.board.begin(), table.board.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '.' || c == '_' || c == '-';
      })) {
    return InvalidArgument("board: \"" + table.board.substr(0, 64) +
                           "\" must be at most 64 letters, digits, '.', '_' or '-'");
  }
  if (table.module_count < 1 || table.module_count > kMaxModules) {
    return InvalidArgument("modules: " + std::to_string(table.module_count) +
                           " is out of range (1.." + std::to_string(kMaxModules) +
                           ", the fabric manager's limit)");
  }
  const std::string board_range = " (modules 1.." + std::to_string(table.module_count) + ")";
  if (table.partitions.empty()) return InvalidArgument("partitions: the table has no partitions");
  if (table.partitions.size() > static_cast<size_t>(kMaxPartitions)) {
    return InvalidArgument("partitions: " + std::to_string(table.partitions.size()) +
                           " partitions, more than the fabric manager's limit of " +
                           std::to_string(kMaxPartitions));
  }
  std::map<uint32_t, size_t> ids;
  std::map<std::vector<int>, size_t> sets;
  for (size_t i = 0; i < table.partitions.size(); ++i) {
    const FabricPartition& partition = table.partitions[i];
    const std::string where =
        "partitions[" + std::to_string(i) + "] (id " + std::to_string(partition.id) + ")";
    auto [id_it, fresh_id] = ids.emplace(partition.id, i);
    if (!fresh_id) {
      return InvalidArgument(where + ": duplicate partition id " + std::to_string(partition.id) +
                             " (also partitions[" + std::to_string(id_it->second) + "])");
    }
    if (partition.modules.empty()) return InvalidArgument(where + ": gpus is empty");
    if (partition.modules.size() > static_cast<size_t>(table.module_count)) {
      return InvalidArgument(where + ": " + std::to_string(partition.modules.size()) +
                             " GPUs, larger than the board" + board_range);
    }
    std::set<int> seen;
    for (size_t j = 0; j < partition.modules.size(); ++j) {
      int module = partition.modules[j];
      if (module < 1 || module > table.module_count) {
        return InvalidArgument(where + ": gpus[" + std::to_string(j) + "]: unknown module ID " +
                               std::to_string(module) + board_range);
      }
      if (!seen.insert(module).second) {
        return InvalidArgument(where + ": gpus[" + std::to_string(j) + "]: module " +
                               std::to_string(module) + " is listed twice");
      }
    }
    std::vector<int> sorted(seen.begin(), seen.end());
    auto [set_it, fresh_set] = sets.emplace(sorted, i);
    if (!fresh_set) {
      return InvalidArgument(where + ": same GPUs " + SetString(sorted) + " as partition id " +
                             std::to_string(table.partitions[set_it->second].id));
    }
  }
  std::map<std::string, int> addresses;
  for (const auto& [module, address] : table.pci_addresses) {
    const std::string where = "pci_addresses[" + std::to_string(module) + "]";
    if (module < 1 || module > table.module_count) {
      return InvalidArgument(where + ": unknown module ID " + std::to_string(module) + board_range);
    }
    if (!IsPciAddress(address)) {
      return InvalidArgument(where + ": \"" + address +
                             "\" is not a PCI address of the form 0000:18:00.0 (lowercase hex)");
    }
    auto [it, fresh] = addresses.emplace(address, module);
    if (!fresh) {
      return InvalidArgument(where + ": PCI address " + address + " is also module " +
                             std::to_string(it->second));
    }
  }
  return Ok();
}

std::string PartitionTableToJson(const PartitionTable& table, int indent) {
  nlohmann::ordered_json out;
  out["board"] = table.board;
  out["modules"] = table.module_count;
  out["partitions"] = nlohmann::ordered_json::array();
  for (const auto& partition : table.partitions) {
    nlohmann::ordered_json p;
    p["id"] = partition.id;
    p["gpus"] = partition.modules;
    out["partitions"].push_back(std::move(p));
  }
  if (!table.pci_addresses.empty()) {
    nlohmann::ordered_json pci = nlohmann::ordered_json::object();
    for (const auto& [module, address] : table.pci_addresses)
      pci[std::to_string(module)] = address;
    out["pci_addresses"] = std::move(pci);
  }
  return out.dump(indent);
}

PartitionTable HgxH100Table() {
  PartitionTable table;
  table.board = "hgx-h100-8gpu";
  table.module_count = 8;
  table.partitions = {
      {0, {1, 2, 3, 4, 5, 6, 7, 8}},
      {1, {1, 2, 3, 4}},
      {2, {5, 6, 7, 8}},
      {3, {1, 3}},
      {4, {2, 4}},
      {5, {5, 7}},
      {6, {6, 8}},
  };
  for (int module = 1; module <= 8; ++module) {
    table.partitions.push_back({static_cast<uint32_t>(6 + module), {module}});
  }
  return table;
}

std::vector<std::string> PresetNames() {
  return {"hgx-h100-8gpu", "hgx-h200-8gpu"};
}

Result<PartitionTable> PresetTable(std::string_view name) {
  // H200 uses the same baseboard fabric as H100 (four third-generation NVSwitches), so the same
  // shared-NVSwitch partitions.
  if (name == "hgx-h100-8gpu") return HgxH100Table();
  if (name == "hgx-h200-8gpu") {
    PartitionTable table = HgxH100Table();
    table.board = "hgx-h200-8gpu";
    return table;
  }
  std::string known;
  for (const auto& preset : PresetNames())
    known += (known.empty() ? "" : ", ") + preset;
  return NotFound("partition table preset \"" + std::string(name) + "\": unknown (known: " + known +
                  ")");
}

std::vector<int> MaskToIndices(GpuMask mask) {
  std::vector<int> out;
  while (mask) {
    out.push_back(__builtin_ctzll(mask));
    mask &= mask - 1;
  }
  return out;
}

std::string MaskToString(GpuMask mask, int base) {
  std::vector<int> modules;
  for (int index : MaskToIndices(mask))
    modules.push_back(index + base);
  return SetString(modules);
}

}  // namespace tessera::topology

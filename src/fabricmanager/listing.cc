// `tessera fabric partitions` output: the fabric manager documentation's table, and JSON.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "fabricmanager/operator_tools.h"

namespace tessera::fabricmanager {
namespace {

std::string Joined(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i)
    out += (i ? "," : "") + items[i];
  return out;
}

// The partition's GPUs in module order.
std::vector<PartitionGpu> ByModule(const SupportedPartition& partition) {
  std::vector<PartitionGpu> gpus = partition.gpus;
  std::sort(gpus.begin(), gpus.end(),
            [](const PartitionGpu& a, const PartitionGpu& b) { return a.module_id < b.module_id; });
  return gpus;
}

std::string AddressOf(const ModuleMap& modules, int module) {
  auto it = modules.pci_by_module.find(module);
  return it == modules.pci_by_module.end() ? "" : it->second;
}

}  // namespace

std::string PartitionsTable(const std::vector<SupportedPartition>& partitions,
                            const ModuleMap& modules) {
  std::vector<std::vector<std::string>> rows = {
      {"PARTITION ID", "STATUS", "GPUs", "NVLINKS", "GPU PHYSICAL IDs", "PCI ADDRESSES"}};
  for (const auto& partition : partitions) {
    std::vector<std::string> ids, addresses;
    for (const auto& gpu : ByModule(partition)) {
      ids.push_back(std::to_string(gpu.module_id));
      std::string address = AddressOf(modules, gpu.module_id);
      addresses.push_back(address.empty() ? "-" : address);
    }
    rows.push_back({std::to_string(partition.id), partition.active ? "Active" : "Inactive",
                    std::to_string(partition.gpus.size()), std::to_string(partition.nvlinks()),
                    Joined(ids), Joined(addresses)});
  }
  std::vector<size_t> width(rows.front().size(), 0);
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size(); ++c)
      width[c] = std::max(width[c], row[c].size());
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line += std::string(width[c] - row[c].size() + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

std::string PartitionsJson(const std::vector<SupportedPartition>& partitions,
                           const ModuleMap& modules) {
  nlohmann::ordered_json doc;
  doc["partitions"] = nlohmann::ordered_json::array();
  for (const auto& partition : partitions) {
    nlohmann::ordered_json p;
    p["id"] = partition.id;
    p["active"] = partition.active;
    p["nvlinks"] = partition.nvlinks();
    p["gpus"] = nlohmann::ordered_json::array();
    for (const auto& gpu : ByModule(partition)) {
      std::string address = AddressOf(modules, gpu.module_id);
      nlohmann::ordered_json g;
      g["module"] = gpu.module_id;
      g["pci_address"] =
          address.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(address);
      p["gpus"].push_back(std::move(g));
    }
    doc["partitions"].push_back(std::move(p));
  }
  return doc.dump(2) + "\n";
}

}  // namespace tessera::fabricmanager

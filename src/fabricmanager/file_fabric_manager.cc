// A fabric manager stand-in that keeps the active partition list in a JSON file.
#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/bounded_file.h"
#include "fabricmanager/fabricmanager.h"

namespace tessera::fabricmanager {
namespace {

class FileFabricManager : public FabricManager {
 public:
  FileFabricManager(std::shared_ptr<const topology::PartitionPlanner> planner, std::string path)
      : planner_(std::move(planner)), path_(std::move(path)) {}

  Result<std::vector<SupportedPartition>> ListPartitions() override {
    auto state = Load();
    if (!state) return state.error();
    const topology::PartitionTable& table = planner_->table();
    std::vector<SupportedPartition> out;
    for (const auto& partition : table.partitions) {
      SupportedPartition p;
      p.id = partition.id;
      p.active = state->IsActive(partition.id);
      for (int module : partition.modules) {
        PartitionGpu gpu;
        gpu.module_id = module;
        auto it = table.pci_addresses.find(module);
        if (it != table.pci_addresses.end()) gpu.pci_address = it->second;
        p.gpus.push_back(std::move(gpu));
      }
      out.push_back(std::move(p));
    }
    return out;
  }

  Status Activate(uint32_t partition_id) override {
    return Update([&](topology::ActivationState& s) { return s.Activate(partition_id); });
  }
  Status Deactivate(uint32_t partition_id) override {
    return Update([&](topology::ActivationState& s) { return s.Deactivate(partition_id); });
  }
  Status SetActivatedPartitions(const std::vector<uint32_t>& partition_ids) override {
    return Update([&](topology::ActivationState& s) { return s.SetActive(partition_ids); });
  }
  std::string Describe() const override { return "state file " + path_; }

 private:
  Result<topology::ActivationState> Load() const {
    topology::ActivationState state(planner_);
    auto text = ReadBoundedFile(path_, kMaxStateFileBytes);
    if (!text) {
      if (text.error().category == ErrorCategory::kNotFound) return state;
      return text.error();
    }
    nlohmann::json doc;
    try {
      doc = nlohmann::json::parse(*text);
    } catch (const nlohmann::json::exception& e) {
      return InvalidArgument(path_ + ": " + e.what());
    }
    if (!doc.is_object() || !doc.contains("active") || !doc["active"].is_array()) {
      return InvalidArgument(path_ + ": expected {\"active\": [partition ids]}");
    }
    std::vector<uint32_t> ids;
    for (const auto& id : doc["active"]) {
      if (!id.is_number_unsigned() || id.get<uint64_t>() > UINT32_MAX) {
        return InvalidArgument(path_ + ": active: " +
                               id.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                               " is not a partition id");
      }
      ids.push_back(id.get<uint32_t>());
    }
    if (auto set = state.SetActive(ids); !set) return set.error().WithContext(path_);
    return state;
  }

  template <typename Change>
  Status Update(Change change) {
    auto state = Load();
    if (!state) return state.error();
    if (auto changed = change(*state); !changed) return changed;
    nlohmann::json doc;
    doc["active"] = state->Active();
    return WriteFileAtomically(path_, doc.dump() + "\n", 0644);
  }

  std::shared_ptr<const topology::PartitionPlanner> planner_;
  std::string path_;
};

}  // namespace

Result<std::unique_ptr<FabricManager>> OpenFileFabricManager(topology::PartitionTable table,
                                                             std::string state_path) {
  auto planner = topology::PartitionPlanner::Create(std::move(table));
  if (!planner) return planner.error();
  auto manager = std::make_unique<FileFabricManager>(std::move(*planner), std::move(state_path));
  // Refuse a corrupt or inconsistent state file up front.
  if (auto listed = manager->ListPartitions(); !listed) return listed.error();
  return std::unique_ptr<FabricManager>(std::move(manager));
}

}  // namespace tessera::fabricmanager

// A fabric manager stand-in that keeps the active partition list in a JSON file, and the failed
// NVLinks an operator or a test writes there:
//   {"active": [ids], "nvlink_failed": {"gpus": [{"pci_address": "0000:18:00.0", "ports": [4]}],
//                                       "switches": [...]}}
#include <algorithm>
#include <nlohmann/json.hpp>
#include <tuple>

#include "common/atomic_file.h"
#include "common/bounded_file.h"
#include "common/pci_address.h"
#include "fabricmanager/fabricmanager.h"

namespace tessera::fabricmanager {
namespace {

std::string JsonExcerpt(const nlohmann::json& value) {
  std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return text.size() > 40 ? text.substr(0, 40) + "..." : text;
}

// One "gpus" or "switches" list of "nvlink_failed", at most `max` devices.
Result<std::vector<NvlinkFailedDevice>> FailedDevicesFromJson(const nlohmann::json& list,
                                                              const std::string& where,
                                                              size_t max) {
  if (!list.is_array() || list.size() > max) {
    return InvalidArgument(where + ": expected a list of at most " + std::to_string(max) +
                           " devices");
  }
  std::vector<NvlinkFailedDevice> out;
  for (const auto& entry : list) {
    const std::string at = where + "[" + std::to_string(out.size()) + "]";
    if (!entry.is_object() || !entry.contains("pci_address") || !entry["pci_address"].is_string() ||
        !IsPciAddress(entry["pci_address"].get<std::string>()))
      return InvalidArgument(at +
                             ": expected {\"pci_address\": \"0000:18:00.0\", \"ports\": [...]}");
    NvlinkFailedDevice device;
    device.pci_address = entry["pci_address"].get<std::string>();
    const nlohmann::json ports = entry.value("ports", nlohmann::json::array());
    if (!ports.is_array() || ports.size() > 64)
      return InvalidArgument(at + ".ports: expected a list of at most 64 port numbers");
    for (const auto& port : ports) {
      if (!port.is_number_unsigned() || port.get<uint64_t>() > UINT32_MAX)
        return InvalidArgument(at + ".ports: " + JsonExcerpt(port) + " is not a port number");
      device.ports.push_back(port.get<uint32_t>());
    }
    std::sort(device.ports.begin(), device.ports.end());
    device.ports.erase(std::unique(device.ports.begin(), device.ports.end()), device.ports.end());
    out.push_back(std::move(device));
  }
  return out;
}

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
  Result<NvlinkFailedDevices> GetNvlinkFailedDevices() override {
    auto doc = ReadDoc();
    if (!doc) return doc.error();
    NvlinkFailedDevices out;
    if (!doc->contains("nvlink_failed")) return out;
    const nlohmann::json& failed = (*doc)["nvlink_failed"];
    if (!failed.is_object())
      return InvalidArgument(path_ +
                             ": nvlink_failed: expected {\"gpus\": [...], \"switches\": [...]}");
    for (auto [key, max, into] : {std::tuple{"gpus", size_t{16}, &out.gpus},
                                  std::tuple{"switches", size_t{12}, &out.switches}}) {
      if (!failed.contains(key)) continue;
      auto devices = FailedDevicesFromJson(failed[key], path_ + ": nvlink_failed." + key, max);
      if (!devices) return devices.error();
      *into = std::move(*devices);
    }
    return out;
  }

  std::string Describe() const override { return "state file " + path_; }

 private:
  // The state file's document; {"active": []} when there is none.
  Result<nlohmann::json> ReadDoc() const {
    auto text = ReadBoundedFile(path_, kMaxStateFileBytes);
    if (!text) {
      if (text.error().category == ErrorCategory::kNotFound)
        return nlohmann::json{{"active", nlohmann::json::array()}};
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
    return doc;
  }

  Result<topology::ActivationState> Load() const { return Load(ReadDoc()); }
  Result<topology::ActivationState> Load(const Result<nlohmann::json>& read) const {
    if (!read) return read.error();
    const nlohmann::json& doc = *read;
    topology::ActivationState state(planner_);
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

  // Changes the active list; the rest of the file stays as it was.
  template <typename Change>
  Status Update(Change change) {
    auto doc = ReadDoc();
    auto state = Load(doc);
    if (!state) return state.error();
    if (auto changed = change(*state); !changed) return changed;
    (*doc)["active"] = state->Active();
    return WriteFileAtomically(path_, doc->dump() + "\n", 0644);
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

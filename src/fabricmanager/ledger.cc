// Who holds which partition, and what reconciling with the fabric manager takes. Pure.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "common/untrusted_text.h"
#include "fabricmanager/fabricmanager.h"

namespace tessera::fabricmanager {
namespace {

constexpr size_t kMaxLedgerBytes = 1 << 20;
constexpr size_t kMaxHolders = 4096;
constexpr size_t kMaxHolderBytes = 256;

std::string SizeList(const std::vector<int>& sizes) {
  std::string out;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i) out += i + 1 == sizes.size() ? " or " : ", ";
    out += std::to_string(sizes[i]);
  }
  return out;
}

}  // namespace

PartitionLedger::PartitionLedger(std::shared_ptr<const topology::PartitionPlanner> planner)
    : planner_(std::move(planner)) {}

Result<uint32_t> PartitionLedger::PartitionOf(const std::vector<std::string>& pci_addresses) const {
  const auto& table = planner_->table();
  topology::GpuMask mask = 0;
  for (const auto& address : pci_addresses) {
    auto it = std::find_if(table.pci_addresses.begin(), table.pci_addresses.end(),
                           [&](const auto& entry) { return entry.second == address; });
    if (it == table.pci_addresses.end()) {
      return InvalidArgument("GPU " + Excerpt(address, 64) + " is no module of the fabric");
    }
    mask |= topology::GpuMask{1} << (it->first - 1);
  }
  for (int index = 0; index < planner_->partition_count(); ++index) {
    if (planner_->partition_mask(index) == mask) return table.partitions[index].id;
  }
  std::vector<int> sizes = planner_->Sizes();
  return FailedPrecondition("GPUs " + topology::MaskToString(mask) +
                            " are not one fabric partition (partitions have " + SizeList(sizes) +
                            " GPUs: the set must equal one partition exactly)");
}

Result<bool> PartitionLedger::Hold(const std::string& holder, uint32_t partition) {
  auto index = planner_->IndexOf(partition);
  if (!index)
    return InvalidArgument("partition " + std::to_string(partition) + ": not in the table");
  if (auto it = holders_.find(holder); it != holders_.end()) {
    if (it->second == partition) return true;
    return FailedPrecondition(holder + " already holds partition " + std::to_string(it->second));
  }
  const topology::GpuMask mine = planner_->partition_mask(*index);
  bool held = false;
  for (const auto& [other, id] : holders_) {
    if (id == partition) {
      held = true;
      continue;
    }
    const topology::GpuMask theirs = planner_->partition_mask(*planner_->IndexOf(id));
    if (mine & theirs) {
      return FailedPrecondition("partition " + std::to_string(partition) + " " +
                                topology::MaskToString(mine) + " overlaps partition " +
                                std::to_string(id) + " " + topology::MaskToString(theirs) +
                                ", held by " + other);
    }
  }
  holders_[holder] = partition;
  return held;
}

std::optional<uint32_t> PartitionLedger::Release(const std::string& holder) {
  auto it = holders_.find(holder);
  if (it == holders_.end()) return std::nullopt;
  uint32_t partition = it->second;
  holders_.erase(it);
  for (const auto& [other, id] : holders_)
    if (id == partition) return std::nullopt;
  return partition;
}

std::optional<uint32_t> PartitionLedger::HeldBy(const std::string& holder) const {
  auto it = holders_.find(holder);
  if (it == holders_.end()) return std::nullopt;
  return it->second;
}

std::vector<uint32_t> PartitionLedger::Held() const {
  std::set<uint32_t> ids;
  for (const auto& [holder, id] : holders_)
    ids.insert(id);
  return {ids.begin(), ids.end()};
}

std::string PartitionLedger::ToJson() const {
  nlohmann::ordered_json doc;
  doc["holders"] = nlohmann::ordered_json::object();
  for (const auto& [holder, id] : holders_)
    doc["holders"][holder] = id;
  return doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

Result<PartitionLedger> PartitionLedger::Parse(
    std::string_view text, std::shared_ptr<const topology::PartitionPlanner> planner) {
  if (text.size() > kMaxLedgerBytes) return InvalidArgument("ledger: larger than 1 MiB");
  if (auto nesting = CheckJsonNesting(text, "ledger"); !nesting) return nesting.error();
  nlohmann::json doc = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
  if (doc.is_discarded() || !doc.is_object() || doc.size() != 1 || !doc.contains("holders") ||
      !doc["holders"].is_object()) {
    return InvalidArgument("ledger: expected {\"holders\": {holder: partition id}}");
  }
  if (doc["holders"].size() > kMaxHolders)
    return InvalidArgument("ledger: more than " + std::to_string(kMaxHolders) + " holders");
  PartitionLedger ledger(std::move(planner));
  for (const auto& [holder, id] : doc["holders"].items()) {
    if (holder.empty() || holder.size() > kMaxHolderBytes)
      return InvalidArgument("ledger: a holder name is empty or longer than 256 bytes");
    if (!id.is_number_unsigned() || id.get<uint64_t>() > UINT32_MAX)
      return InvalidArgument("ledger: holder " + Excerpt(holder) + ": not a partition id");
    if (auto held = ledger.Hold(holder, id.get<uint32_t>()); !held)
      return held.error().WithContext("ledger");
  }
  return ledger;
}

Result<std::vector<uint32_t>> LedgerPartitionIds(std::string_view text) {
  if (text.size() > kMaxLedgerBytes) return InvalidArgument("ledger: larger than 1 MiB");
  if (auto nesting = CheckJsonNesting(text, "ledger"); !nesting) return nesting.error();
  nlohmann::json doc = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("holders") ||
      !doc["holders"].is_object()) {
    return InvalidArgument("ledger: expected {\"holders\": {holder: partition id}}");
  }
  std::set<uint32_t> ids;
  for (const auto& [holder, id] : doc["holders"].items()) {
    if (!id.is_number_unsigned() || id.get<uint64_t>() > UINT32_MAX)
      return InvalidArgument("ledger: holder " + Excerpt(holder) + ": not a partition id");
    ids.insert(id.get<uint32_t>());
    if (ids.size() > static_cast<size_t>(topology::kMaxPartitions))
      return InvalidArgument("ledger: more partitions than a fabric has");
  }
  return std::vector<uint32_t>(ids.begin(), ids.end());
}

ReconcilePlan PlanReconcile(const PartitionLedger& ledger, const std::vector<uint32_t>& fm_active,
                            const std::function<bool(const std::string& holder)>& alive) {
  ReconcilePlan plan;
  std::set<uint32_t> kept;
  for (const auto& [holder, id] : ledger.holders()) {
    if (alive(holder)) {
      kept.insert(id);
    } else {
      plan.drop.push_back(holder);
    }
  }
  const std::set<uint32_t> active(fm_active.begin(), fm_active.end());
  for (uint32_t id : active)
    if (!kept.count(id)) plan.deactivate.push_back(id);
  for (uint32_t id : kept)
    if (!active.count(id)) plan.activate.push_back(id);
  return plan;
}

}  // namespace tessera::fabricmanager

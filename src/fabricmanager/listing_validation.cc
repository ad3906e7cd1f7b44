// What a fabric manager's partition list must be before anything places on it: one check, used
// by serve (and every other owner, through OpenFabric and TableFromPartitions) and by the
// operator's `tessera fabric partitions`, so the CLI never shows as fine a list serve refuses.
#include <map>
#include <set>

#include "common/pci_address.h"
#include "common/untrusted_text.h"
#include "fabricmanager/fabricmanager.h"
#include "topology/topology.h"

namespace tessera::fabricmanager {
namespace {

// More defects than this are counted, not listed: a hostile or broken list must not make an
// unbounded message.
constexpr size_t kListedDefects = 16;

class Defects {
 public:
  void Add(std::string defect) {
    ++count_;
    if (out_.size() < kListedDefects) out_.push_back(std::move(defect));
  }
  std::vector<std::string> Take() {
    if (count_ > out_.size())
      out_.push_back("and " + std::to_string(count_ - out_.size()) + " more defects");
    return std::move(out_);
  }

 private:
  size_t count_ = 0;
  std::vector<std::string> out_;
};

void CheckPartition(const SupportedPartition& partition, int board, const std::string& range,
                    Defects& defects) {
  const std::string name = "partition " + std::to_string(partition.id);
  if (partition.gpus.empty()) defects.Add(name + " has no GPUs");
  if (partition.gpus.size() > static_cast<size_t>(board)) {
    defects.Add(name + " has " + std::to_string(partition.gpus.size()) +
                " GPUs, more than the board's " + std::to_string(board) + " modules");
  }
  std::set<int> seen;
  for (const auto& gpu : partition.gpus) {
    if (gpu.module_id < 1 || gpu.module_id > board) {
      defects.Add(name + ": unknown module ID " + std::to_string(gpu.module_id) + range);
    } else if (!seen.insert(gpu.module_id).second) {
      defects.Add(name + ": module " + std::to_string(gpu.module_id) + " is listed twice");
    }
    if (!gpu.pci_address.empty() && !IsPciAddress(gpu.pci_address)) {
      defects.Add(name + ": module " + std::to_string(gpu.module_id) + " has the bus ID \"" +
                  Excerpt(gpu.pci_address, 40) + "\", which is no PCI address");
    }
  }
}

}  // namespace

std::vector<std::string> ListingDefects(const std::vector<SupportedPartition>& partitions,
                                        int board_modules) {
  Defects defects;
  if (partitions.empty()) defects.Add("the fabric manager reports no partitions");
  if (partitions.size() > static_cast<size_t>(topology::kMaxPartitions)) {
    defects.Add(std::to_string(partitions.size()) + " partitions, more than the API's limit of " +
                std::to_string(topology::kMaxPartitions));
  }
  // The board: the table's module count when one names it, else the API's limit.
  const int board = board_modules > 0 && board_modules <= topology::kMaxModules
                        ? board_modules
                        : topology::kMaxModules;
  const std::string range = " (modules 1.." + std::to_string(board) + ")";
  std::map<uint32_t, size_t> ids;
  std::map<std::vector<int>, uint32_t> sets;
  for (size_t i = 0; i < partitions.size(); ++i) {
    const SupportedPartition& partition = partitions[i];
    if (auto [it, fresh] = ids.emplace(partition.id, i); !fresh) {
      defects.Add("partition ID " + std::to_string(partition.id) + " is listed twice (entries " +
                  std::to_string(it->second + 1) + " and " + std::to_string(i + 1) + ")");
    }
    CheckPartition(partition, board, range, defects);
    std::vector<int> modules = partition.modules();
    if (modules.empty()) continue;
    if (auto [it, fresh] = sets.emplace(modules, partition.id);
        !fresh && it->second != partition.id) {
      defects.Add("partitions " + std::to_string(it->second) + " and " +
                  std::to_string(partition.id) + " have the same GPUs " + ModuleSet(modules));
    }
  }
  return defects.Take();
}

Status ValidateListing(const std::vector<SupportedPartition>& partitions, int board_modules) {
  std::vector<std::string> defects = ListingDefects(partitions, board_modules);
  if (defects.empty()) return Ok();
  std::string message = "the fabric manager's partition list is unusable: ";
  for (size_t i = 0; i < defects.size(); ++i)
    message += (i ? "; " : "") + defects[i];
  return InvalidArgument(message);
}

Status CheckActivatedList(const std::vector<uint32_t>& partition_ids) {
  if (partition_ids.size() > static_cast<size_t>(topology::kMaxPartitions)) {
    return InvalidArgument("active partition list: " + std::to_string(partition_ids.size()) +
                           " IDs, more than the API's limit of " +
                           std::to_string(topology::kMaxPartitions));
  }
  std::set<uint32_t> seen;
  for (uint32_t id : partition_ids) {
    if (!seen.insert(id).second) {
      return InvalidArgument("active partition list: partition " + std::to_string(id) +
                             " is given twice; each active partition is named once");
    }
  }
  return Ok();
}

}  // namespace tessera::fabricmanager

// The one chooser behind GetPreferredAllocation and fleet placement inside a node.
#include "topology/topology.h"

namespace tessera::topology {

Result<GpuChooser> GpuChooser::Create(GpuTopology topology, std::optional<PartitionTable> table,
                                      LinkWeights weights) {
  GpuChooser chooser;
  for (size_t i = 0; i < topology.gpus.size(); ++i) {
    chooser.index_of_id_[topology.gpus[i].id] = static_cast<int>(i);
  }
  std::vector<std::string> addresses;
  for (const auto& gpu : topology.gpus)
    addresses.push_back(gpu.pci_address);
  auto scorer = GpuSetScorer::Create(std::move(topology), weights);
  if (!scorer) return scorer.error();
  chooser.scorer_ = std::move(*scorer);
  if (!table) return chooser;

  auto planner = PartitionPlanner::Create(std::move(*table));
  if (!planner) return planner.error();
  chooser.planner_ = std::move(*planner);
  const PartitionTable& t = chooser.planner_->table();
  if (t.pci_addresses.empty()) {
    return InvalidArgument("partition table " + t.board +
                           ": pci_addresses is empty; module ID is not PCI order, so partition "
                           "mode needs the module ID -> PCI address map of this host");
  }
  chooser.module_of_gpu_.assign(addresses.size(), 0);
  // A module without a GPU on this host (fallen off the bus) is simply never free.
  chooser.gpu_of_module_.assign(t.module_count + 1, -1);
  for (size_t i = 0; i < addresses.size(); ++i) {
    int module = 0;
    for (const auto& [m, address] : t.pci_addresses) {
      if (address == addresses[i]) module = m;
    }
    if (module == 0) {
      return InvalidArgument("GPU " + chooser.scorer_->topology().gpus[i].id + " (" + addresses[i] +
                             ") is not in partition table " + t.board + "'s pci_addresses");
    }
    chooser.module_of_gpu_[i] = module;
    chooser.gpu_of_module_[module] = static_cast<int>(i);
  }
  return chooser;
}

Result<GpuMask> GpuChooser::ChooseMask(GpuMask available, int size, GpuMask must) const {
  if (!planner_) return scorer_->Choose(available, size, must);
  if (must & ~available) {
    return InvalidArgument("required GPUs " + MaskToString(must & ~available, 0) +
                           " are not available");
  }
  GpuMask free_modules = 0, must_modules = 0;
  for (size_t i = 0; i < module_of_gpu_.size(); ++i) {
    GpuMask module_bit = GpuMask{1} << (module_of_gpu_[i] - 1);
    if (available & (GpuMask{1} << i)) free_modules |= module_bit;
    if (must & (GpuMask{1} << i)) must_modules |= module_bit;
  }
  auto choice = planner_->Choose(free_modules, size, must_modules);
  if (!choice) return choice.error();
  GpuMask out = 0;
  for (GpuMask m = choice->modules; m; m &= m - 1) {
    out |= GpuMask{1} << gpu_of_module_[__builtin_ctzll(m) + 1];
  }
  return out;
}

Result<std::vector<std::string>> GpuChooser::Choose(const std::vector<std::string>& available,
                                                    const std::vector<std::string>& must_include,
                                                    int size) const {
  auto to_mask = [&](const std::vector<std::string>& ids, const char* what) -> Result<GpuMask> {
    GpuMask mask = 0;
    for (const auto& id : ids) {
      auto it = index_of_id_.find(id);
      if (it == index_of_id_.end()) {
        return InvalidArgument(std::string(what) + ": unknown device ID \"" + id + "\"");
      }
      mask |= GpuMask{1} << it->second;
    }
    return mask;
  };
  auto available_mask = to_mask(available, "available");
  if (!available_mask) return available_mask.error();
  auto must_mask = to_mask(must_include, "must_include");
  if (!must_mask) return must_mask.error();
  auto chosen = ChooseMask(*available_mask, size, *must_mask);
  if (!chosen) return chosen.error();
  std::vector<std::string> out;
  for (int index : MaskToIndices(*chosen))
    out.push_back(scorer_->topology().gpus[index].id);
  return out;
}

}  // namespace tessera::topology

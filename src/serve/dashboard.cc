#include "serve/dashboard.h"

#include <algorithm>
#include <unordered_map>

#include "serve/gpus.h"

namespace tessera::serve {

std::vector<std::pair<std::string, std::vector<int>>> DisplayPartitions(
    const topology::PartitionTable& table) {
  std::vector<const topology::FabricPartition*> order;
  for (const auto& partition : table.partitions)
    if (static_cast<int>(partition.modules.size()) < table.module_count)
      order.push_back(&partition);
  std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    return a->modules.size() > b->modules.size();
  });
  std::vector<std::pair<std::string, std::vector<int>>> out;
  std::vector<bool> taken(static_cast<size_t>(table.module_count) + 1, false);
  for (const auto* partition : order) {
    bool free = true;
    for (int module : partition->modules)
      free = free && module >= 1 && module <= table.module_count && !taken[module];
    if (!free) continue;
    for (int module : partition->modules)
      taken[module] = true;
    out.emplace_back("P" + std::to_string(partition->id), partition->modules);
  }
  // Keep only the partitions of the largest size taken (the tiling), so groups do not mix
  // levels; modules left out share one unlabelled group.
  if (!out.empty()) {
    const size_t size = out.front().second.size();
    std::erase_if(out, [size](const auto& group) { return group.second.size() != size; });
    if (size == 1) out.clear();  // single GPUs only: one group says more than eight
  }
  std::vector<int> rest;
  std::vector<bool> grouped(static_cast<size_t>(table.module_count) + 1, false);
  for (const auto& group : out)
    for (int module : group.second)
      grouped[module] = true;
  for (int module = 1; module <= table.module_count; ++module)
    if (!grouped[module]) rest.push_back(module);
  if (!rest.empty()) out.emplace_back("", std::move(rest));
  return out;
}

namespace {

// Groups of one node: its GPUs (indices into view.gpus) by partition, by module then address.
std::vector<DashboardGroup> GroupsOf(const std::vector<size_t>& members,
                                     const topology::PartitionTable* table,
                                     const DashboardView& view) {
  std::vector<size_t> sorted = members;
  std::sort(sorted.begin(), sorted.end(), [&](size_t a, size_t b) {
    const auto& x = view.gpus[a];
    const auto& y = view.gpus[b];
    if (x.module != y.module) return x.module < y.module;
    return x.record.pci_address < y.record.pci_address;
  });
  std::vector<DashboardGroup> groups;
  if (!table) {
    groups.push_back({"", std::move(sorted)});
    return groups;
  }
  std::unordered_map<int, size_t> group_of_module;
  for (const auto& [label, modules] : DisplayPartitions(*table)) {
    for (int module : modules)
      group_of_module[module] = groups.size();
    groups.push_back({label, {}});
  }
  DashboardGroup loose{"", {}};
  for (size_t index : sorted) {
    auto it = group_of_module.find(view.gpus[index].module);
    if (it == group_of_module.end()) {
      loose.gpus.push_back(index);
    } else {
      groups[it->second].gpus.push_back(index);
    }
  }
  std::erase_if(groups, [](const DashboardGroup& group) { return group.gpus.empty(); });
  if (!loose.gpus.empty()) groups.push_back(std::move(loose));
  return groups;
}

// mu held: every GPU as the caller may see it, counted by state; returns their indices in
// view.gpus by GPU ID.
std::unordered_map<std::string, size_t> AddDashboardGpusLocked(const Model& model,
                                                               const Caller& caller,
                                                               const Gauges* gauges,
                                                               DashboardView& view) {
  view.gpus.reserve(model.gpus.size());
  std::unordered_map<std::string, size_t> index_of;  // GPU ID -> index in view.gpus
  index_of.reserve(model.gpus.size());
  for (const auto& gpu : model.gpus) {
    DashboardGpu entry;
    entry.record = gpu;
    RedactGpuLocked(model, caller, entry.record);
    // Figures only of the GPUs the caller holds; the others count by state alone.
    if (gauges && HoldsGpuLocked(model, caller, gpu)) {
      if (auto it = gauges->gpus.find(gpu.id()); it != gauges->gpus.end())
        entry.gauges = it->second;
    }
    view.gpu_states[static_cast<size_t>(gpu.state)]++;
    index_of.emplace(gpu.id(), view.gpus.size());
    view.gpus.push_back(std::move(entry));
  }
  return index_of;
}

// mu held: this host's GPUs (embedded mode) as one node, by its partition table's modules.
void AddHostNodeLocked(const Model& model, DashboardView& view, std::vector<bool>& placed) {
  const auto* table = model.options.partition_table ? &*model.options.partition_table : nullptr;
  std::unordered_map<std::string, int> module_of_pci;
  if (table)
    for (const auto& [module, pci] : table->pci_addresses)
      module_of_pci[pci] = module;
  std::vector<size_t> members;
  for (size_t i = 0; i < view.gpus.size(); ++i) {
    if (!view.gpus[i].record.node.empty()) continue;
    if (auto it = module_of_pci.find(view.gpus[i].record.pci_address); it != module_of_pci.end())
      view.gpus[i].module = it->second;
    members.push_back(i);
    placed[i] = true;
  }
  if (!members.empty()) view.nodes.push_back({"", GroupsOf(members, table, view)});
}

// mu held: the fleet's nodes by name, each with the GPUs it publishes not shown yet.
void AddFleetNodesLocked(const Model& model,
                         const std::unordered_map<std::string, size_t>& index_of,
                         DashboardView& view, std::vector<bool>& placed) {
  std::vector<const Model::Node*> nodes;
  for (const auto& node : model.nodes)
    nodes.push_back(&node);
  std::sort(nodes.begin(), nodes.end(),
            [](const auto* a, const auto* b) { return a->name < b->name; });
  for (const auto* node : nodes) {
    std::vector<size_t> members;
    for (size_t t = 0; t < node->gpus.size(); ++t) {
      auto it = index_of.find(model.gpus[node->gpus[t]].id());
      if (it == index_of.end() || placed[it->second]) continue;
      if (node->planner && t < node->module_of.size())
        view.gpus[it->second].module = node->module_of[t];
      members.push_back(it->second);
      placed[it->second] = true;
    }
    const auto* table = node->planner ? &node->planner->table() : nullptr;
    if (!members.empty()) view.nodes.push_back({node->name, GroupsOf(members, table, view)});
  }
}

// mu held: tenancies the caller sees, with the queue's share and the latest telemetry. The
// queue knows tenancies by incarnation; only those that exist are shown, by name.
void AddDashboardTenanciesLocked(const Model& model, const Caller& caller, const Gauges* gauges,
                                 DashboardView& view) {
  std::unordered_map<std::string, const fleet::Tenancy*> by_uid;
  for (const auto& [name, tenancy] : model.tenancies)
    by_uid[tenancy.uid] = &tenancy;
  for (const auto& usage : model.queue->Usage()) {
    auto tenancy = by_uid.find(usage.name);
    if (tenancy == by_uid.end() || !caller.Sees(*tenancy->second)) continue;
    DashboardTenancy entry;
    entry.share.name = tenancy->second->name;
    entry.share.policy = model.queue->GetTenancy(usage.name);
    entry.share.policy.quota_pending = model.queue->PendingQuotaOf(usage.name);
    entry.share.gpus_in_use = usage.in_use;
    entry.share.mig_gpus_in_use = usage.other_gpus;
    entry.share.pending = usage.pending;
    entry.share.share = usage.share;
    entry.share.target = usage.target;
    if (gauges) {
      if (auto it = gauges->tenancies.find(entry.share.name); it != gauges->tenancies.end())
        entry.gauges = it->second;
    }
    view.tenancies.push_back(std::move(entry));
  }
}

// mu held: how many wait now, the whole queue's or the tenant's own.
size_t DashboardQueueTotalLocked(const Model& model, const Caller& caller) {
  size_t total = 0;
  if (caller.admin) {
    total = model.queue->pending_count();
    for (const auto& [uid, count] : model.mig_waiting)
      total += static_cast<size_t>(count);
    for (const auto& [uid, count] : model.share_waiting)
      total += static_cast<size_t>(count);
  } else if (!caller.tenancy_uid.empty()) {
    total = static_cast<size_t>(model.queue->PendingOf(caller.tenancy_uid) +
                                model.MigPendingOf(caller.tenancy_uid) +
                                model.SharePendingOf(caller.tenancy_uid));
  }
  return total;
}

}  // namespace

DashboardView BuildDashboardLocked(const Model& model, const Caller& caller, const Gauges* gauges) {
  DashboardView view;
  view.time_ms = fleet::NowMs();
  if (gauges) view.telemetry_ms = gauges->time_ms;
  if (model.queue) view.scheduling = scheduling::ModeName(model.queue->options().mode);
  view.containers = model.container_counts;
  const auto index_of = AddDashboardGpusLocked(model, caller, gauges, view);

  // Nodes: this host (embedded), or the fleet's nodes by name; GPUs of a node that no longer
  // publishes itself stay under its name.
  std::vector<bool> placed(view.gpus.size(), false);
  if (!model.options.fleet) AddHostNodeLocked(model, view, placed);
  AddFleetNodesLocked(model, index_of, view, placed);
  std::map<std::string, std::vector<size_t>> vanished;
  for (size_t i = 0; i < view.gpus.size(); ++i)
    if (!placed[i]) vanished[view.gpus[i].record.node].push_back(i);
  for (auto& [name, members] : vanished)
    view.nodes.push_back({name, GroupsOf(members, nullptr, view)});

  if (model.queue) {
    AddDashboardTenanciesLocked(model, caller, gauges, view);
    view.queue_total = DashboardQueueTotalLocked(model, caller);
  }
  return view;
}

}  // namespace tessera::serve

// What each GPU of the simulated fleet holds, and the placement of one request: whole GPUs on one
// node, a MIG instance (an idle one of the profile, else one the planner makes), a share packed
// by memory and compute.
//
// Mode changes: a GPU with no instances is in whole mode. Making its first instance turns MIG on;
// giving a GPU whose instances are all idle to whole or share work destroys them and turns MIG
// off. Hopper applies both without a GPU reset; each counts as one reconfiguration.
#include "placement/mig_fleet_state.h"

#include <algorithm>
#include <tuple>

namespace tessera::placement {
namespace {

constexpr double kShareEpsilon = 1e-9;

}  // namespace

Result<std::vector<mig::LiveInstance>> LayoutInstances(const StaticLayout& layout,
                                                       const mig::ProfileTable& table) {
  std::vector<const mig::Profile*> profiles;
  for (const std::string& name : layout.profiles) {
    const mig::Profile* profile = table.FindByName(name);
    if (!profile) return InvalidArgument("layout " + layout.name + ": no profile " + name);
    profiles.push_back(profile);
  }
  std::stable_sort(profiles.begin(), profiles.end(),
                   [](const mig::Profile* a, const mig::Profile* b) { return a->size > b->size; });
  mig::ShapeGpu gpu;
  gpu.table = &table;
  for (const mig::Profile* profile : profiles) {
    auto step = mig::PlanInstance(gpu, *profile);
    if (!step || !step->destroy.empty())
      return InvalidArgument("layout " + layout.name + " does not fit one GPU");
    mig::LiveInstance instance;
    instance.gpu_instance_id = static_cast<uint32_t>(gpu.instances.size() + 1);
    instance.profile_id = profile->id;
    instance.placement = step->create.placement;
    gpu.instances.push_back(instance);
  }
  return gpu.instances;
}

Result<MigFleetState> MigFleetState::Create(const MigSimOptions& options) {
  if (options.nodes < 1 || options.nodes > 10000 || options.gpus_per_node < 1 ||
      options.gpus_per_node > kMaxWholeGpus) {
    return InvalidArgument("fleet: 1..10000 nodes of 1..8 GPUs");
  }
  MigFleetState state;
  state.by_demand_ = options.policy == MigPolicy::kByDemand;
  state.gpus_per_node_ = options.gpus_per_node;
  state.table_ = &mig::BuiltinH100Table();
  const size_t count = static_cast<size_t>(options.nodes) * options.gpus_per_node;
  state.gpus_.resize(count);
  state.shape_.resize(count);
  for (mig::ShapeGpu& gpu : state.shape_)
    gpu.table = state.by_demand_ ? state.table_ : nullptr;
  if (state.by_demand_) return state;
  size_t gpu = 0;
  for (const auto& [layout, nodes] : options.split.nodes) {
    auto instances = LayoutInstances(layout, *state.table_);
    if (!instances) return instances.error();
    if (nodes < 0 || gpu + static_cast<size_t>(nodes) * options.gpus_per_node > count)
      return InvalidArgument("split: more nodes than the fleet has");
    if (nodes > 0 && !layout.profiles.empty())
      state.static_profiles_.insert(layout.profiles.begin(), layout.profiles.end());
    if (nodes > 0 && layout.profiles.empty()) state.static_whole_per_node_ = options.gpus_per_node;
    for (size_t end = gpu + static_cast<size_t>(nodes) * options.gpus_per_node; gpu < end; ++gpu)
      state.SetLayout(gpu, *instances);
  }
  if (gpu != count) return InvalidArgument("split: fewer nodes than the fleet has");
  return state;
}

void MigFleetState::SetLayout(size_t gpu, const std::vector<mig::LiveInstance>& instances) {
  gpus_[gpu].whole_layout = instances.empty();
  if (instances.empty()) return;
  gpus_[gpu].mig_mode = true;
  shape_[gpu].table = table_;
  shape_[gpu].instances = instances;
  for (const mig::LiveInstance& instance : instances)
    ++idle_[instance.profile_id % idle_.size()];
}

bool MigFleetState::EverPlaceable(const MigTraceRequest& request) const {
  switch (request.kind) {
    case MigRequestKind::kWhole:
      return request.gpus <= (by_demand_ ? gpus_per_node_ : static_whole_per_node_);
    case MigRequestKind::kMig:
      if (!table_->FindByName(request.profile)) return false;
      return by_demand_ || static_profiles_.count(request.profile) > 0;
    case MigRequestKind::kShare:
      return by_demand_ || static_whole_per_node_ > 0;
  }
  return false;
}

double MigFleetState::Fraction(const MigTraceRequest& request) const {
  switch (request.kind) {
    case MigRequestKind::kWhole:
      return request.gpus;
    case MigRequestKind::kMig: {
      const mig::Profile* profile = table_->FindByName(request.profile);
      return profile ? static_cast<double>(profile->compute_slices) / table_->compute_slices : 0;
    }
    case MigRequestKind::kShare:
      return request.share_compute;
  }
  return 0;
}

// Free for whole or share work: nothing runs there and nothing is reserved there.
bool MigFleetState::Usable(size_t gpu) const {
  const Gpu& g = gpus_[gpu];
  return g.whole_layout && !g.whole_busy && !g.held && g.shares == 0 &&
         g.busy_compute_slices == 0 && shape_[gpu].reserved.empty();
}

// Whether the planner may make or hand out instances there.
void MigFleetState::Refresh(size_t gpu) {
  const Gpu& g = gpus_[gpu];
  shape_[gpu].placeable = !g.held && !g.whole_busy && g.shares == 0;
}

void MigFleetState::HoldNode(int node, bool held) {
  for (int g = node * gpus_per_node_; g < (node + 1) * gpus_per_node_; ++g) {
    gpus_[g].held = held;
    Refresh(g);
  }
}

// The node with the most GPUs free of whole and share work and of busy instances; a node where a
// MIG request holds a reservation only when no other is left.
int MigFleetState::NodeToHold() const {
  int best = -1, best_free = -2;
  for (int node = 0; node < static_cast<int>(gpus_.size()) / gpus_per_node_; ++node) {
    int free = 0;
    for (int g = node * gpus_per_node_; g < (node + 1) * gpus_per_node_ && free >= 0; ++g)
      free = shape_[g].reserved.empty() ? free + (Usable(g) ? 1 : 0) : -1;
    if (free > best_free) {
      best = node;
      best_free = free;
    }
  }
  return best;
}

// Takes a usable GPU out of MIG mode (its instances are all idle) for whole or share work.
void MigFleetState::Reclaim(size_t gpu) {
  for (const mig::LiveInstance& instance : shape_[gpu].instances)
    --idle_[instance.profile_id % idle_.size()];
  destroyed_ += static_cast<int64_t>(shape_[gpu].instances.size());
  shape_[gpu].instances.clear();
  shape_[gpu].placeable = false;
  if (gpus_[gpu].mig_mode) {
    gpus_[gpu].mig_mode = false;
    ++mode_changes_;
  }
}

bool MigFleetState::PlaceWhole(size_t request, int gpus, MigWork& work) {
  const bool holder = node_hold_ && node_hold_->first == request;
  if (holder) HoldNode(node_hold_->second, false);
  if (FindWhole(gpus, work)) {
    if (holder) node_hold_.reset();
    return true;
  }
  if (holder) {
    HoldNode(node_hold_->second, true);
  } else if (!node_hold_) {
    if (int node = NodeToHold(); node >= 0) {
      node_hold_ = {request, node};
      HoldNode(node, true);
    }
  }
  return false;
}

bool MigFleetState::FindWhole(int gpus, MigWork& work) {
  int best_node = -1;
  std::tuple<size_t, int> best_key;
  std::vector<int> best_gpus, usable;
  for (int node = 0; node < static_cast<int>(gpus_.size()) / gpus_per_node_; ++node) {
    usable.clear();
    for (int g = node * gpus_per_node_; g < (node + 1) * gpus_per_node_; ++g)
      if (Usable(g)) usable.push_back(g);
    const int available = static_cast<int>(usable.size());
    if (available < gpus) continue;
    // The GPUs with the fewest idle instances to destroy; then the node left fullest.
    std::stable_sort(usable.begin(), usable.end(), [&](int a, int b) {
      return shape_[a].instances.size() < shape_[b].instances.size();
    });
    usable.resize(gpus);
    size_t destroys = 0;
    for (int g : usable)
      destroys += shape_[g].instances.size();
    auto key = std::make_tuple(destroys, available);
    if (best_node < 0 || key < best_key) {
      best_node = node;
      best_key = key;
      best_gpus = usable;
    }
  }
  if (best_node < 0) return false;
  for (int g : best_gpus) {
    Reclaim(g);
    gpus_[g].whole_busy = true;
  }
  work.gpus = std::move(best_gpus);
  return true;
}

bool MigFleetState::PlaceShare(double memory_gib, double compute, MigWork& work) {
  int best = -1;
  for (size_t g = 0; g < gpus_.size(); ++g) {
    const Gpu& gpu = gpus_[g];
    if (gpu.shares == 0 || gpu.held ||
        gpu.memory_gib + memory_gib > kMaxShareMemoryGib + kShareEpsilon ||
        gpu.compute + compute > 1 + kShareEpsilon) {
      continue;
    }
    if (best < 0 || gpu.memory_gib > gpus_[best].memory_gib) best = static_cast<int>(g);
  }
  for (size_t g = 0; best < 0 && g < gpus_.size(); ++g)
    if (Usable(g) && shape_[g].instances.empty()) best = static_cast<int>(g);
  for (size_t g = 0; best < 0 && g < gpus_.size(); ++g)
    if (Usable(g)) best = static_cast<int>(g);
  if (best < 0) return false;
  if (gpus_[best].shares == 0) Reclaim(best);
  Gpu& gpu = gpus_[best];
  ++gpu.shares;
  gpu.memory_gib += memory_gib;
  gpu.compute += compute;
  work.gpus = {best};
  work.memory_gib = memory_gib;
  work.compute = compute;
  return true;
}

}  // namespace tessera::placement

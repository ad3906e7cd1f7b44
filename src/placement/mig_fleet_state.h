// Inside the MIG fleet simulator: what every GPU holds, and how one request is placed on it.
#pragma once

#include <array>
#include <optional>
#include <set>

#include "placement/mig_fleet.h"

namespace tessera::placement {

// Where a started request runs, so that its end gives it back.
struct MigWork {
  std::vector<int> gpus;
  uint32_t gpu_instance_id = 0;        // mig
  double memory_gib = 0, compute = 0;  // share
};

class MigFleetState {
 public:
  static Result<MigFleetState> Create(const MigSimOptions& options);

  // False for a size or profile this fleet can never give.
  bool EverPlaceable(const MigTraceRequest& request) const;
  // The share of one GPU the request holds while it runs.
  double Fraction(const MigTraceRequest& request) const;

  // The first whole request that finds no node holds one: nothing new starts there until it does.
  bool PlaceWhole(size_t request, int gpus, MigWork& work);
  // `request` names the waiting request, so a reservation made for it is its own.
  bool PlaceMig(size_t request, std::string_view profile, MigWork& work);
  bool PlaceShare(double memory_gib, double compute, MigWork& work);
  void Release(const MigWork& work);

  int gpu_count() const { return static_cast<int>(gpus_.size()); }
  int64_t created() const { return created_; }
  int64_t destroyed() const { return destroyed_; }
  int64_t mode_changes() const { return mode_changes_; }

 private:
  struct Gpu {
    bool whole_layout = true;  // static: may run whole and share work; by demand: always
    bool mig_mode = false;
    bool whole_busy = false;
    bool held = false;  // on the node a waiting whole request holds
    int shares = 0;
    double memory_gib = 0, compute = 0;
    uint32_t busy_compute_slices = 0;
    uint32_t next_id = 1;
  };
  struct Held {
    size_t request = 0;
    size_t gpu = 0;
    nvml::Placement placement;
  };

  bool Usable(size_t gpu) const;
  void Refresh(size_t gpu);
  void HoldNode(int node, bool held);
  int NodeToHold() const;
  bool FindWhole(int gpus, MigWork& work);
  void Reclaim(size_t gpu);
  bool TakeIdle(const mig::Profile& profile, MigWork& work);
  bool MakeInstance(const mig::Profile& profile, MigWork& work);
  void Reserve(size_t request, std::string_view profile);
  void SetLayout(size_t gpu, const std::vector<mig::LiveInstance>& instances);

  bool by_demand_ = true;
  int gpus_per_node_ = 8;
  const mig::ProfileTable* table_ = nullptr;
  std::vector<Gpu> gpus_;
  std::vector<mig::ShapeGpu> shape_;
  std::array<int64_t, 64> idle_ = {};  // idle instances per profile ID
  std::set<std::string, std::less<>> static_profiles_;
  int static_whole_per_node_ = 0;  // most whole-layout GPUs on one node
  std::optional<Held> reservation_;
  std::optional<std::pair<size_t, int>> node_hold_;  // whole request, node
  int64_t created_ = 0, destroyed_ = 0, mode_changes_ = 0;
};

// A layout's instances on an empty GPU, largest first; InvalidArgument when they do not fit.
Result<std::vector<mig::LiveInstance>> LayoutInstances(const StaticLayout& layout,
                                                       const mig::ProfileTable& table);

}  // namespace tessera::placement

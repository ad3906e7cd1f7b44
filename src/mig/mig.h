// Declarative MIG layouts: `tessera mig apply` makes each GPU's MIG instances match a layout file
// (profiles per GPU, as NVIDIA's mig-parted does). Parsing and planning are pure; Apply talks to
// NVML. Profile tables are data: one YAML file per board (the H100 80GB table is built in).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "nvml/nvml.h"

namespace tessera::mig {

// ---- Profile tables ----

struct Profile {
  std::string name;  // "1g.10gb"
  uint32_t id = 0;   // nvidia-smi's profile ID, what NVML's instance calls take
  uint32_t compute_slices = 0;
  uint32_t size = 0;             // memory slices covered
  std::vector<uint32_t> starts;  // allowed first memory slices
  uint32_t max_instances = 0;
};

struct ProfileTable {
  std::string board;                        // "H100 80GB"
  std::vector<std::string> pci_device_ids;  // "10de:2330"
  uint32_t memory_slices = 0;
  uint32_t compute_slices = 0;
  std::vector<Profile> profiles;

  const Profile* FindByName(std::string_view name) const;
  const Profile* FindById(uint32_t id) const;
};

// A table file (data/mig-profiles/*.yaml); every placement must fit in memory_slices.
Result<ProfileTable> ParseProfileTable(std::string_view yaml);
// The H100 80GB table compiled in from data/mig-profiles/h100-80gb.yaml.
const ProfileTable& BuiltinH100Table();
// The table for a GPU's "10de:2330" among `tables`, or nullptr.
const ProfileTable* TableForDevice(const std::vector<ProfileTable>& tables,
                                   std::string_view pci_device_id);

// ---- Layout files ----
//   version: v1
//   mig-configs:
//     all-1g.10gb:
//       - devices: all            # or a list of GPU indices (PCI order) / PCI addresses
//         mig-enabled: true
//         mig-devices: {"1g.10gb": 7}

struct DeviceSelector {
  bool all = false;
  std::vector<uint32_t> indices;
  std::vector<std::string> pci_addresses;
  bool Matches(uint32_t index, const std::string& pci_address) const;
};

struct LayoutEntry {
  DeviceSelector devices;
  bool mig_enabled = false;
  std::vector<std::pair<std::string, uint32_t>> mig_devices;  // profile name -> count
};

struct LayoutConfig {
  std::string name;
  std::vector<LayoutEntry> entries;
};

// The named config of a layout file; with an empty `name` the file must hold exactly one.
Result<LayoutConfig> ParseLayoutConfig(std::string_view yaml, const std::string& name);

// ---- Planning (pure) ----

struct Instance {
  uint32_t gpu_instance_id = 0;
  uint32_t profile_id = 0;
  nvml::Placement placement;
  uint32_t compute_instances = 0;  // a slice usable as one MIG device has exactly one
  bool whole = true;               // that compute instance spans the GPU instance
};

struct GpuState {
  std::string pci_address;
  bool mig_enabled = false;  // current mode
  bool mig_pending = false;
  std::vector<Instance> instances;
};

struct Creation {
  uint32_t profile_id = 0;
  std::string profile;
  nvml::Placement placement;
};

struct GpuPlan {
  std::string pci_address;
  std::optional<bool> set_mig_mode;  // change the mode first
  std::vector<uint32_t> destroy;     // GPU instance IDs
  std::vector<Creation> create;      // in this order
  bool empty() const { return !set_mig_mode && destroy.empty() && create.empty(); }
};

// What to change so that `state` holds exactly `wanted` (MIG on with those profiles) or MIG off
// (`wanted` = nullopt). Instances that already match are kept; new ones are placed in the free
// memory slices, and only when they cannot fit there is every instance re-created.
Result<GpuPlan> PlanGpu(const GpuState& state, const std::optional<LayoutEntry>& wanted,
                        const ProfileTable& table);

// "destroy GI 7 (1g.10gb at 0+1)", one line per step; "no change" for an empty plan.
std::vector<std::string> DescribePlan(const GpuPlan& plan, const ProfileTable& table);

// ---- Shaping by demand (pure, demand.cc) ----
// serve and the fleet bench make the MIG instance a waiting request needs instead of waiting for
// an operator to re-apply a layout. Running work is never touched: only idle instances go.

inline bool Overlaps(const nvml::Placement& a, const nvml::Placement& b) {
  return a.start < b.start + b.size && b.start < a.start + a.size;
}

// A GPU instance as shaping sees it.
struct LiveInstance {
  uint32_t gpu_instance_id = 0;
  uint32_t profile_id = 0;
  nvml::Placement placement;
  bool busy = false;  // holds work (a container, a share, a process): never destroyed
};

// One GPU in MIG mode.
struct ShapeGpu {
  const ProfileTable* table = nullptr;  // its board; nullptr: not shaped
  std::vector<LiveInstance> instances;
  // Memory slices kept for a larger waiting request: nothing new is made there, and no idle
  // instance there is handed out.
  std::vector<nvml::Placement> reserved;
  bool placeable = true;  // false: leave it alone (draining, quarantined, faulted)
};

// How one new instance is made on one GPU.
struct ShapeStep {
  std::vector<uint32_t> destroy;  // idle GPU instance IDs, destroyed first
  Creation create;
  // What stays possible afterwards, higher is better: the largest profile (memory slices) that
  // could still be made, then how many placements of every profile stay open.
  uint32_t largest_after = 0;
  uint32_t open_after = 0;
};

// The best way to make one instance of `profile` on `gpu`: at an allowed start whose memory
// slices hold no busy instance and no reservation, within the board's compute slices and the
// profile's instance limit; fewest idle instances destroyed, then the most left possible.
// nullopt when no start qualifies.
std::optional<ShapeStep> PlanInstance(const ShapeGpu& gpu, const Profile& profile);

// Across GPUs: which GPU makes the instance. Prefers fewer destroyed instances, then GPUs that
// already hold work (whole free GPUs stay whole for large requests), then the most left
// possible, then the lowest index. `profile_name` is looked up in each GPU's table.
struct ShapeChoice {
  size_t gpu = 0;
  ShapeStep step;
};
std::optional<ShapeChoice> ChooseInstance(const std::vector<ShapeGpu>& gpus,
                                          std::string_view profile_name);

// Where a request that fits nowhere now should wait (its reservation): the GPU and placement
// whose busy instances in the way hold the fewest compute slices. nullopt when no GPU's board
// offers the profile.
struct Reservation {
  size_t gpu = 0;
  nvml::Placement placement;
};
std::optional<Reservation> ChooseReservation(const std::vector<ShapeGpu>& gpus,
                                             std::string_view profile_name);

// ---- Effects (NVML) ----

Result<GpuState> ReadGpuState(const nvml::Library& nvml, const std::string& pci_address);
// Runs the plan; stops at the first failing NVML call and names it. A mode change that needs a
// GPU reset stops the plan with FailedPrecondition (instances cannot be made before it).
Status ExecutePlan(const nvml::Library& nvml, const GpuPlan& plan);

}  // namespace tessera::mig

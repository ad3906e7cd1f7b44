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

// ---- Effects (NVML) ----

Result<GpuState> ReadGpuState(const nvml::Library& nvml, const std::string& pci_address);
// Runs the plan; stops at the first failing NVML call and names it. A mode change that needs a
// GPU reset stops the plan with FailedPrecondition (instances cannot be made before it).
Status ExecutePlan(const nvml::Library& nvml, const GpuPlan& plan);

}  // namespace tessera::mig

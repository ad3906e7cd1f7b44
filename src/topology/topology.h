// GPU topology: NVLink fabric partition tables, partition-aware choice of GPUs, and link-based
// scoring of GPU sets. Pure logic: callers hand in file contents, an Inventory, or masks; nothing
// here opens a file or talks to a daemon.
//
// Two ways to choose k GPUs inside one node, behind one chooser (GpuChooser) that serves both the
// device plugin's GetPreferredAllocation and the fleet:
//  - partition mode (a fabric partition table is known, e.g. HGX H100/H200 in shared NVSwitch
//    mode): only an inactive partition of exactly k modules whose GPUs are all free can be given,
//    and among those the one whose loss of future capacity is smallest;
//  - scoring mode (no table): the k-GPU set with the best links (NVLink count, same PCIe switch,
//    same NUMA node, cross-socket), exact for up to 16 GPUs.
//
// Masks: bit i of a GpuMask is module ID i+1 in partition mode (PartitionPlanner), and GPU index i
// of a GpuTopology in scoring mode (GpuSetScorer, GpuChooser).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace tessera::inventory {
struct Inventory;
}

namespace tessera::topology {

using GpuMask = uint64_t;

// The fabric manager API handles at most 16 GPUs and 64 partitions per system
// (FM_MAX_NUM_GPUS, FM_MAX_FABRIC_PARTITIONS in nv_fm_types.h).
inline constexpr int kMaxModules = 16;
inline constexpr int kMaxPartitions = 64;
// Exact best-set search is done over all subsets up to this many GPUs; above it, greedily.
inline constexpr int kMaxExactGpus = 16;
// Largest GPU count a GpuTopology can describe (one bit per GPU in a GpuMask).
inline constexpr int kMaxGpus = 64;

// ---------------------------------------------------------------------------------------------
// Fabric partition tables (data, not code: boards differ).

struct FabricPartition {
  uint32_t id = 0;
  std::vector<int> modules;  // GPU module IDs (1-based, as the board numbers them), sorted

  friend bool operator==(const FabricPartition&, const FabricPartition&) = default;
};

struct PartitionTable {
  std::string board;     // e.g. "hgx-h100-8gpu"
  int module_count = 0;  // GPU modules on the board; module IDs run 1..module_count
  std::vector<FabricPartition> partitions;
  // Module ID -> PCI address of that GPU on one host. Module ID is not PCI order, so this map is
  // per host (the fabric manager reports it as physicalId + pciBusId). May be empty in a table
  // that only describes the board.
  std::map<int, std::string> pci_addresses;

  const FabricPartition* Find(uint32_t id) const;
  friend bool operator==(const PartitionTable&, const PartitionTable&) = default;
};

enum class TableFormat { kYaml, kJson };

// Parses and validates a table. Unknown fields are rejected; errors name the field
// ("partitions[3].gpus[1]: module 9 is not on the board (modules 1..8)").
Result<PartitionTable> ParsePartitionTable(std::string_view text, TableFormat format);
// Picks the format from the file name (".json" -> JSON, ".yaml"/".yml" -> YAML) and prefixes
// errors with the name.
Result<PartitionTable> ParsePartitionTableFile(std::string_view file_name, std::string_view text);
// Checks a table built in code the same way the parser does.
Status ValidatePartitionTable(const PartitionTable& table);
// JSON in the format ParsePartitionTable reads.
std::string PartitionTableToJson(const PartitionTable& table, int indent = 2);

// The HGX H100/H200 8-GPU table in shared NVSwitch mode: P0 {1..8}; P1 {1,2,3,4};
// P2 {5,6,7,8}; P3 {1,3}; P4 {2,4}; P5 {5,7}; P6 {6,8}; P7..P14 {1}..{8}.
PartitionTable HgxH100Table();
// Built-in tables by name: "hgx-h100-8gpu", "hgx-h200-8gpu" (same fabric).
Result<PartitionTable> PresetTable(std::string_view name);
std::vector<std::string> PresetNames();

// ---------------------------------------------------------------------------------------------
// Partition choice.

// How much future capacity a choice destroys: for each partition size, how many partitions of
// that size stop being available. Compared largest size first, so breaking one 4-GPU partition
// costs more than breaking any number of 2-GPU ones.
struct CapacityLoss {
  std::array<uint8_t, kMaxModules + 1> lost_by_size{};  // index = partition size

  // Comparable key: size 16's count in the top bits, size 1's in the bottom.
  unsigned __int128 Key() const;
  friend bool operator==(const CapacityLoss&, const CapacityLoss&) = default;
};

struct PartitionChoice {
  uint32_t partition_id = 0;
  int index = -1;       // position in the table
  GpuMask modules = 0;  // bit m-1 for module m
  CapacityLoss loss;
  unsigned __int128 loss_key = 0;  // loss.Key(), kept for fast comparisons
};

// A validated table compiled to bitmasks, with the best choice precomputed for every free set
// (boards of up to 12 modules; larger boards compute it per call).
class PartitionPlanner {
 public:
  static Result<std::shared_ptr<const PartitionPlanner>> Create(PartitionTable table);

  const PartitionTable& table() const { return table_; }
  int module_count() const { return table_.module_count; }
  GpuMask all_modules() const { return (GpuMask{1} << table_.module_count) - 1; }
  GpuMask partition_mask(int index) const { return masks_[index]; }
  int partition_count() const { return static_cast<int>(masks_.size()); }
  std::optional<int> IndexOf(uint32_t partition_id) const;
  bool HasSize(int size) const;
  std::vector<int> Sizes() const;  // distinct partition sizes, ascending

  // Partitions of each size fully inside `free`.
  CapacityLoss Capacity(GpuMask free) const;

  // The partition of exactly `size` modules inside `free` that contains `must`, with the least
  // CapacityLoss; ties go to the lower table position. `free` must already exclude the modules of
  // active partitions. Errors: FailedPrecondition when the table has no partition of that size
  // (names the sizes it has), NotFound when none fits.
  Result<PartitionChoice> Choose(GpuMask free, int size, GpuMask must = 0) const;

  // Hot path for the fleet: the same answer as Choose(free, size) with must = 0, or nullptr when
  // nothing fits or no partition has that size. Valid as long as the planner lives.
  const PartitionChoice* Best(GpuMask free, int size) const;

  // First partition in table order of exactly `size` inside `free` (first-fit), or -1.
  int FirstFit(GpuMask free, int size) const;

  // Whether Best() is a table lookup (boards of up to 12 modules).
  bool precomputed() const { return !precomputed_.empty(); }

 private:
  explicit PartitionPlanner(PartitionTable table);
  PartitionChoice Evaluate(GpuMask free, int index) const;
  std::optional<PartitionChoice> ChooseSlow(GpuMask free, int size, GpuMask must) const;

  PartitionTable table_;
  std::vector<GpuMask> masks_;                    // per table position
  std::vector<int> sizes_;                        // per table position
  std::array<int, kMaxModules + 1> size_slot_{};  // size -> slot in precomputed_, -1 when absent
  int slot_count_ = 0;
  // precomputed_[free * slot_count_ + slot]; index -1 when nothing fits.
  std::vector<PartitionChoice> precomputed_;
};

// Which partitions are active on one board. Activating a partition that shares a module with an
// active one is refused, as the fabric manager requires.
class ActivationState {
 public:
  explicit ActivationState(std::shared_ptr<const PartitionPlanner> planner);

  Status Activate(uint32_t partition_id);
  Status Deactivate(uint32_t partition_id);
  // Replaces the whole set (e.g. re-stating the active list after a fabric-manager restart);
  // all or nothing.
  Status SetActive(const std::vector<uint32_t>& partition_ids);

  bool IsActive(uint32_t partition_id) const;
  std::vector<uint32_t> Active() const;  // sorted
  GpuMask busy_modules() const { return busy_; }
  const PartitionPlanner& planner() const { return *planner_; }

 private:
  std::shared_ptr<const PartitionPlanner> planner_;
  std::vector<bool> active_;  // per table position
  GpuMask busy_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Link-based scoring (no partition table).

// How two GPUs reach each other, best first. NVLink wins over any PCIe path.
enum class LinkType {
  kNvLink,          // at least one NVLink between them
  kSamePcieSwitch,  // share a PCIe bridge below the root port
  kSameNumaNode,    // different switches, same NUMA node (or NUMA unknown)
  kCrossSocket,     // different NUMA nodes: traffic crosses the socket interconnect
};
const char* LinkTypeName(LinkType type);

struct GpuInfo {
  std::string id;           // what callers name it by (device-plugin ID, PCI address, UUID)
  std::string pci_address;  // canonical "0000:18:00.0"; used to map partition modules
  int numa_node = -1;       // -1 = unknown
  // Bridges above the GPU, nearest first, root port last (as in inventory::PciDevice).
  std::vector<std::string> upstream_bridges;
};

struct GpuTopology {
  std::vector<GpuInfo> gpus;
  // nvlinks[i][j]: NVLink links between GPU i and j (symmetric). Empty when unknown: the
  // inventory does not read NVLink yet, so callers pass what `nvidia-smi topo` or NVML reported.
  std::vector<std::vector<int>> nvlinks;
};

// Builds the topology of an inventory's GPUs (PCI order). `nvlinks`, when given, is indexed in
// the same order and must be square with one row per GPU.
Result<GpuTopology> TopologyFromInventory(const inventory::Inventory& inventory,
                                          std::vector<std::vector<int>> nvlinks = {});

// Points per pair of GPUs in a set; the set's score is the sum over its pairs.
struct LinkWeights {
  int per_nvlink = 100;
  int same_pcie_switch = 30;
  int same_numa_node = 20;
  int cross_socket = 10;
};

class GpuSetScorer {
 public:
  static Result<std::shared_ptr<const GpuSetScorer>> Create(GpuTopology topology,
                                                            LinkWeights weights = {});

  int gpu_count() const { return static_cast<int>(topology_.gpus.size()); }
  const GpuTopology& topology() const { return topology_; }
  LinkType Link(int a, int b) const;
  int PairScore(int a, int b) const { return pair_[a * gpu_count() + b]; }
  int64_t Score(GpuMask set) const;

  // The `size`-GPU subset of `available` containing `must` with the highest score; ties go to the
  // set whose lowest differing GPU index is smaller. Exact up to kMaxExactGpus GPUs, greedy above.
  Result<GpuMask> Choose(GpuMask available, int size, GpuMask must = 0) const;

 private:
  GpuSetScorer(GpuTopology topology, LinkWeights weights);

  GpuTopology topology_;
  LinkWeights weights_;
  std::vector<LinkType> link_;      // n*n
  std::vector<int> pair_;           // n*n
  std::vector<int32_t> set_score_;  // 2^n entries when n <= kMaxExactGpus
};

// ---------------------------------------------------------------------------------------------
// One chooser for a node: what GetPreferredAllocation and the fleet call.

class GpuChooser {
 public:
  // With a table, every GPU of the topology must be a module in the table's pci_addresses and
  // vice versa (module ID is not PCI order, so the map is required).
  static Result<GpuChooser> Create(GpuTopology topology,
                                   std::optional<PartitionTable> table = std::nullopt,
                                   LinkWeights weights = {});

  bool partition_mode() const { return planner_ != nullptr; }
  const GpuSetScorer& scorer() const { return *scorer_; }
  const PartitionPlanner* planner() const { return planner_.get(); }

  // `size` GPUs from `available` (IDs), including every ID in `must_include`. In partition mode
  // the answer is one whole fabric partition; sizes no partition has are refused.
  Result<std::vector<std::string>> Choose(const std::vector<std::string>& available,
                                          const std::vector<std::string>& must_include,
                                          int size) const;
  // The same over GPU indices of the topology.
  Result<GpuMask> ChooseMask(GpuMask available, int size, GpuMask must = 0) const;

 private:
  std::shared_ptr<const GpuSetScorer> scorer_;
  std::shared_ptr<const PartitionPlanner> planner_;
  std::vector<int> module_of_gpu_;  // GPU index -> module ID (partition mode)
  std::vector<int> gpu_of_module_;  // module ID -> GPU index (partition mode; [0] unused)
  std::map<std::string, int> index_of_id_;
};

// Mask helpers.
inline int MaskSize(GpuMask mask) {
  return __builtin_popcountll(mask);
}
std::vector<int> MaskToIndices(GpuMask mask);
// "{1,2,3}" listing bit i as i + base.
std::string MaskToString(GpuMask mask, int base = 1);

}  // namespace tessera::topology

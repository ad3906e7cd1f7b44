// The dashboard's one document per poll: every GPU grouped by node and NVLink partition with
// its lease state, holder, the reason it is quarantined or draining, and its latest telemetry;
// each tenancy's share, use and measured figures; counts. Built under the model's lock from what
// the model keeps up to date (GPUs, the queue's per-tenancy usage, counts), never by walking the
// containers, so a poll stays cheap with 10,000 of them.
#pragma once

#include <array>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "serve/model.h"
#include "serve/types.h"

namespace tessera::serve {

// The latest telemetry pass's figures (telemetry part), by GPU ID and by tenancy name.
struct GpuGauges {
  std::optional<double> util_percent;  // unset for a GPU in MIG mode (no GPU_UTIL per slice)
  std::optional<uint64_t> memory_used, memory_total;
  std::optional<double> power_watts;
  bool lost = false;
};
struct TenancyGauges {
  double sm_percent = 0;  // its processes' SM use, percent of one GPU (200: two GPUs busy)
  uint64_t memory_bytes = 0;
  double power_watts = 0;
};
struct Gauges {
  int64_t time_ms = 0;
  std::unordered_map<std::string, GpuGauges> gpus;
  std::map<std::string, TenancyGauges> tenancies;
};

struct DashboardGpu {
  fleet::GpuRecord record;  // as the caller may see it (Gpus::List rules)
  int module = 0;           // NVLink module ID in partition mode, else 0
  GpuGauges gauges;
};

struct DashboardGroup {
  std::string label;         // "P1" (a partition of the node's table), "" without one
  std::vector<size_t> gpus;  // indices into DashboardView::gpus, by module then PCI address
};

struct DashboardNode {
  std::string name;  // the Kubernetes node, or "" for this host
  std::vector<DashboardGroup> groups;
};

struct DashboardTenancy {
  TenancyShare share;
  TenancyGauges gauges;
};

struct DashboardView {
  int64_t time_ms = 0;
  int64_t telemetry_ms = 0;  // the telemetry pass the gauges come from; 0: none
  std::string scheduling;
  std::vector<DashboardGpu> gpus;
  std::vector<DashboardNode> nodes;
  std::vector<DashboardTenancy> tenancies;
  std::array<int64_t, fleet::kLeaseStateCount> gpu_states{};
  std::array<int64_t, 4> containers{};
  size_t queue_total = 0;
};

// The partitions a node's GPUs are shown in: the largest partitions smaller than the whole
// board that do not overlap, largest first then in table order (HGX: P1 {1-4}, P2 {5-8}); modules
// in none of them share a group labelled "". Pure.
std::vector<std::pair<std::string, std::vector<int>>> DisplayPartitions(
    const topology::PartitionTable& table);

// mu held.
DashboardView BuildDashboardLocked(const Model& model, const Caller& caller, const Gauges* gauges);

}  // namespace tessera::serve

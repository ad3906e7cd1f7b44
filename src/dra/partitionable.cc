// MIG by demand (KEP-4815 partitionable devices, resource.k8s.io/v1): one counter set per GPU,
// the whole GPU consuming all of it, and every profile at every allowed start consuming its
// slices. The scheduler allocates a device only while the counters it consumes are free, so two
// allocated devices of one GPU never overlap; prepare makes the instance (driver.cc).
//
// Counters, all counts: "compute-slices" (the board's compute slices), "memory-slices" (its
// memory slices) and "memory-slice-<k>", 1 each, so that placements cannot overlap even where the
// totals would fit; a profile the board allows fewer instances of than it has starts (the +me
// profiles: one at a time) adds "<profile>-instances". Memory is counted in slices, not bytes:
// slices are what the hardware partitions, and a profile's bytes are not its share of the board's
// (an H100's 1g.10gb has 9856 MiB, its 7g.80gb 80 GiB less what the driver keeps).
#include "dra/partitionable.h"

#include <algorithm>

#include "mig/placements.h"

namespace tessera::dra {
namespace {

std::string SliceCounter(uint32_t slice) {
  return "memory-slice-" + std::to_string(slice);
}

// The profiles of which the board allows fewer instances than it has starts: their counter.
std::string InstancesCounter(const mig::Profile& profile) {
  return mig::ProfileLabel(profile.name) + "-instances";
}

bool Limited(const mig::Profile& profile) {
  return profile.max_instances > 0 && profile.max_instances < profile.starts.size();
}

bool Overlaps(uint32_t start, uint32_t size, const ForeignInstance& other) {
  return start < other.start + other.size && other.start < start + size;
}

// The counter set with the foreign instances' share taken out.
CounterSet CountersOf(const std::string& name, const mig::ProfileTable& table,
                      const std::vector<ForeignInstance>& foreign) {
  CounterSet set{name, {}};
  uint64_t compute = table.compute_slices, memory = table.memory_slices;
  for (uint32_t s = 0; s < table.memory_slices; ++s)
    set.counters[SliceCounter(s)] = 1;
  for (const auto& profile : table.profiles) {
    if (Limited(profile)) set.counters[InstancesCounter(profile)] = profile.max_instances;
  }
  for (const auto& instance : foreign) {
    const mig::Profile* profile = table.FindById(instance.profile_id);
    uint32_t cs = profile ? profile->compute_slices : table.compute_slices;
    compute -= std::min<uint64_t>(compute, cs);
    memory -= std::min<uint64_t>(memory, instance.size);
    for (uint32_t s = instance.start; s < instance.start + instance.size; ++s) {
      if (s < table.memory_slices) set.counters[SliceCounter(s)] = 0;
    }
    if (profile && Limited(*profile)) {
      uint64_t& left = set.counters[InstancesCounter(*profile)];
      left -= std::min<uint64_t>(left, 1);
    }
  }
  set.counters["compute-slices"] = compute;
  set.counters["memory-slices"] = memory;
  return set;
}

}  // namespace

std::string CounterSetName(std::string_view gpu_device_name) {
  return std::string(gpu_device_name) + "-counters";
}

void AddPartitionableGpu(const NodeDevice& whole, const mig::ProfileTable& table,
                         const std::vector<ForeignInstance>& foreign,
                         const std::map<uint32_t, uint64_t>& profile_memory, NodeDevices& node) {
  CounterSet set = CountersOf(CounterSetName(whole.name), table, foreign);
  if (foreign.empty()) {
    // The whole GPU takes every counter at its full value: allocated only while nothing else of
    // the GPU is, and nothing else while it is.
    NodeDevice gpu = whole;
    gpu.counter_set = set.name;
    gpu.consumes = set.counters;
    node.devices.push_back(std::move(gpu));
  }
  for (const mig::TablePlacement& place : mig::AllPlacements(table)) {
    const mig::Profile& profile = *place.profile;
    uint32_t start = place.placement.start, size = place.placement.size;
    bool taken = std::any_of(foreign.begin(), foreign.end(), [&](const ForeignInstance& other) {
      return Overlaps(start, size, other);
    });
    if (taken || set.counters["compute-slices"] < profile.compute_slices) continue;
    if (Limited(profile) && set.counters[InstancesCounter(profile)] == 0) continue;
    NodeDevice device = whole;
    device.name =
        whole.name + "-mig-" + mig::ProfileLabel(profile.name) + "-" + std::to_string(start);
    device.type = "mig";
    device.uuid.clear();  // the instance has none until prepare makes it
    device.parent_uuid = whole.uuid;
    device.profile = profile.name;
    device.product_name = whole.product_name + " MIG " + profile.name;
    device.mig_slot = MigSlot{profile.name, profile.id, start, size, profile.compute_slices};
    auto memory = profile_memory.find(profile.id);
    device.memory_bytes =
        memory == profile_memory.end() ? std::nullopt : std::optional(memory->second);
    device.nvlink_module.reset();
    device.partition_ids.clear();
    device.counter_set = set.name;
    device.consumes = {{"compute-slices", profile.compute_slices}, {"memory-slices", size}};
    for (uint32_t s = start; s < start + size; ++s)
      device.consumes[SliceCounter(s)] = 1;
    if (Limited(profile)) device.consumes[InstancesCounter(profile)] = 1;
    node.devices.push_back(std::move(device));
  }
  node.counter_sets.push_back(std::move(set));
}

}  // namespace tessera::dra

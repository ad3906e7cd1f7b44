// One pass's readings -> who used what: attribution of every process to a holder (or to nobody)
// and the measured use since the GPU's cursor. Pure.
//
// SM-seconds come from NVML's per-process samples: each sample is one process's SM use over one
// of the driver's sample periods, so a sample covers the time since the GPU's previous sample
// (processes idle in a period have no sample in it). On a GPU in MIG mode there are no
// per-process samples; GPM's SM utilisation of each GPU instance over the pass goes to the
// processes in that instance. Memory GiB-seconds are the memory held at the pass times the time
// since the previous pass. Energy is the counter's delta: the busy part (the share of the pass
// the SMs were in use) split by SM-seconds, the idle part by allocation among the GPU's holders.
#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "telemetry/telemetry.h"

namespace tessera::telemetry {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr int kNobody = -1;

// Runtime ID and Pod UID -> holder index.
struct HolderIndex {
  std::unordered_map<std::string, int> by_runtime_id;
  std::unordered_map<std::string, int> by_pod;  // kNobody when two holders share the Pod
  // Pods whose holder's container ID is not known yet (a Pod just started): a process in any
  // container of such a Pod is its holder's.
  std::unordered_map<std::string, int> by_pod_without_id;

  explicit HolderIndex(const Directory& directory) {
    by_runtime_id.reserve(directory.holders.size());
    for (size_t i = 0; i < directory.holders.size(); ++i) {
      const Holder& holder = directory.holders[i];
      const int at = static_cast<int>(i);
      if (!holder.runtime_id.empty()) by_runtime_id[holder.runtime_id] = at;
      if (holder.pod_uid.empty()) continue;
      auto [it, inserted] = by_pod.try_emplace(holder.pod_uid, at);
      if (!inserted) it->second = kNobody;
      if (holder.runtime_id.empty()) {
        auto [unnamed, first] = by_pod_without_id.try_emplace(holder.pod_uid, at);
        if (!first) unnamed->second = kNobody;
      }
    }
  }

  int Find(const std::optional<CgroupContainer>& container) const {
    if (!container) return kNobody;
    if (!container->container_id.empty()) {
      if (auto it = by_runtime_id.find(container->container_id); it != by_runtime_id.end())
        return it->second;
      if (container->pod_uid.empty()) return kNobody;
      auto it = by_pod_without_id.find(container->pod_uid);
      return it == by_pod_without_id.end() ? kNobody : it->second;
    }
    // A process in the Pod's own cgroup, outside its containers: the Pod's holder.
    if (container->pod_uid.empty()) return kNobody;
    auto it = by_pod.find(container->pod_uid);
    return it == by_pod.end() ? kNobody : it->second;
  }
};

struct PerHolder {
  HolderGpu gpu;
  double sm_seconds = 0;
  bool present = false;
};

}  // namespace

PassResult Integrate(const std::vector<GpuReading>& readings, const PidContainers& pids,
                     const Directory& directory, Cursors& cursors, int64_t now_ms,
                     const IntegrationOptions& options) {
  PassResult result;
  result.time_ms = now_ms;
  const HolderIndex index(directory);
  const double max_gap_s = std::chrono::duration<double>(options.max_gap).count();
  const uint64_t max_gap_us = static_cast<uint64_t>(max_gap_s * 1e6);
  std::unordered_map<uint32_t, int> holder_of_pid;
  auto holder_of = [&](uint32_t pid) {
    auto cached = holder_of_pid.find(pid);
    if (cached != holder_of_pid.end()) return cached->second;
    auto it = pids.find(pid);
    int holder = it == pids.end() ? kNobody : index.Find(it->second);
    holder_of_pid.emplace(pid, holder);
    return holder;
  };
  // Holder index -> its readings, in the order holders first appear.
  std::vector<int> holder_slot(directory.holders.size(), -1);

  for (const GpuReading& reading : readings) {
    const std::string& pci = reading.identity.pci_address;
    GpuSnapshot snapshot;
    snapshot.reading = reading;
    GpuCursor& cursor = cursors[pci];
    if (reading.lost) {
      snapshot.cursor = cursor;
      result.gpus.push_back(std::move(snapshot));
      continue;
    }
    const bool first_pass = cursor.sampled_ms <= 0;
    const double dt_s =
        first_pass
            ? 0.0
            : std::clamp(static_cast<double>(now_ms - cursor.sampled_ms) / 1000.0, 0.0, max_gap_s);
    std::unordered_map<int, PerHolder> per;  // holder (or kNobody) on this GPU
    auto slot = [&](int holder) -> PerHolder& {
      PerHolder& entry = per[holder];
      entry.present = true;
      return entry;
    };

    // Memory and process counts.
    for (const auto& process : reading.processes) {
      PerHolder& entry = slot(holder_of(process.pid));
      entry.gpu.processes++;
      entry.gpu.memory_bytes += process.used_bytes.value_or(0);
      entry.gpu.process_list.push_back({process.pid, process.used_bytes.value_or(0)});
    }

    // SM use: per-process samples (whole GPUs), GPM per GPU instance (MIG).
    std::unordered_map<uint32_t, std::pair<uint64_t, uint32_t>> latest;  // pid -> (ts, sm)
    uint64_t newest = cursor.sample_us;
    if (!reading.samples.empty()) {
      std::vector<const nvml::ProcessUtilization*> ordered;
      ordered.reserve(reading.samples.size());
      for (const auto& sample : reading.samples)
        if (sample.timestamp_us > cursor.sample_us) ordered.push_back(&sample);
      std::sort(ordered.begin(), ordered.end(),
                [](const auto* a, const auto* b) { return a->timestamp_us < b->timestamp_us; });
      uint64_t previous = cursor.sample_us;
      uint64_t covered_us = 0;
      for (size_t i = 0; i < ordered.size(); ++i) {
        const auto& sample = *ordered[i];
        if (i == 0 || sample.timestamp_us != ordered[i - 1]->timestamp_us) {
          // A new sample period: it covers the time since the GPU's previous one.
          // (No sample counted on this GPU before: the period covers at most the pass.)
          covered_us = previous == 0 ? static_cast<uint64_t>(dt_s * 1e6)
                                     : std::min(sample.timestamp_us - previous, max_gap_us);
          previous = sample.timestamp_us;
        }
        auto& last = latest[sample.pid];
        if (sample.timestamp_us >= last.first) last = {sample.timestamp_us, sample.sm_percent};
        // The first pass only sets the cursor: what came before it was nobody's to count.
        if (!first_pass) {
          slot(holder_of(sample.pid)).sm_seconds +=
              static_cast<double>(covered_us) / 1e6 * sample.sm_percent / 100.0;
        }
        newest = std::max(newest, sample.timestamp_us);
      }
    }
    for (const auto& [pid, last] : latest) {
      const double sm = static_cast<double>(last.second);
      slot(holder_of(pid)).gpu.sm_percent += sm;
      snapshot.sm_percent += sm;
    }
    for (const auto& instance : reading.mig_instances) {
      if (!instance.sm_percent) continue;
      // The instance's SM use in GPU units, to its processes by their memory (one holder per
      // instance in practice), to nobody when it has none.
      const double gpu_percent = *instance.sm_percent * instance.share;
      snapshot.sm_percent += gpu_percent;
      std::vector<std::pair<int, double>> weights;
      double total = 0;
      for (const auto& process : reading.processes) {
        if (process.gpu_instance_id != instance.gpu_instance_id ||
            process.compute_instance_id != instance.compute_instance_id)
          continue;
        const double weight = static_cast<double>(process.used_bytes.value_or(0)) + 1.0;
        weights.emplace_back(holder_of(process.pid), weight);
        total += weight;
      }
      if (weights.empty()) weights.emplace_back(kNobody, total = 1.0);
      for (const auto& [holder, weight] : weights) {
        PerHolder& entry = slot(holder);
        entry.gpu.sm_percent += gpu_percent * weight / total;
        entry.sm_seconds += dt_s * gpu_percent / 100.0 * weight / total;
      }
    }

    // Processes too short for any sample, from accounting: nobody can say whose they were (their
    // /proc entry is gone), so they count on the GPU as unattributed. Each ended process once:
    // it ended after the previous counted pass.
    if (!first_pass) {
      for (const auto& ended : reading.ended) {
        if (ended.running || latest.count(ended.pid)) continue;
        const uint64_t end_us = ended.start_us + ended.time_ms * 1000;
        if (end_us <= static_cast<uint64_t>(cursor.sampled_ms) * 1000 ||
            end_us > static_cast<uint64_t>(now_ms) * 1000)
          continue;
        PerHolder& entry = slot(holder_of(ended.pid));
        const double seconds = static_cast<double>(ended.time_ms) / 1000.0;
        entry.sm_seconds += seconds * ended.gpu_percent.value_or(0) / 100.0;
        entry.gpu.delta.memory_gib_seconds +=
            seconds * static_cast<double>(ended.max_memory_bytes.value_or(0)) / kGiB;
      }
    }

    double sm_seconds_total = 0;
    for (auto& [holder, entry] : per) {
      entry.gpu.delta.sm_seconds = entry.sm_seconds;
      entry.gpu.delta.memory_gib_seconds +=
          static_cast<double>(entry.gpu.memory_bytes) / kGiB * dt_s;
      sm_seconds_total += entry.sm_seconds;
    }

    // Energy: the counter's delta since the cursor (a counter that went back was reset with the
    // driver: a new baseline).
    double joules = 0;
    if (reading.energy_mj) {
      if (cursor.energy_mj > 0 && *reading.energy_mj >= cursor.energy_mj && !first_pass)
        joules = static_cast<double>(*reading.energy_mj - cursor.energy_mj) / 1000.0;
      cursor.energy_mj = *reading.energy_mj;
    }
    if (dt_s > 0 && joules > 0)
      snapshot.power_watts = joules / dt_s;
    else if (reading.power_mw)
      snapshot.power_watts = *reading.power_mw / 1000.0;
    if (joules > 0) {
      const double busy = dt_s > 0 ? std::clamp(sm_seconds_total / dt_s, 0.0, 1.0) : 0.0;
      const double active = joules * busy;
      const double idle = joules - active;
      if (sm_seconds_total > 0) {
        for (auto& [holder, entry] : per)
          entry.gpu.delta.energy_joules += active * entry.sm_seconds / sm_seconds_total;
      }
      // Idle energy by allocation: each holder of this GPU its share; what nobody holds (a
      // free GPU, free MIG slices) is nobody's.
      double allocated = 0;
      std::vector<std::pair<int, double>> shares;
      for (size_t i = 0; i < directory.holders.size(); ++i) {
        auto it = directory.holders[i].gpus.find(pci);
        if (it == directory.holders[i].gpus.end() || it->second <= 0) continue;
        shares.emplace_back(static_cast<int>(i), it->second);
        allocated += it->second;
      }
      const double scale = allocated > 1.0 ? 1.0 / allocated : 1.0;
      double given = 0;
      for (const auto& [holder, share] : shares) {
        slot(holder).gpu.delta.energy_joules += idle * share * scale;
        given += idle * share * scale;
      }
      slot(kNobody).gpu.delta.energy_joules += std::max(0.0, idle - given);
    }

    // Holders that hold this GPU show up even while idle.
    for (size_t i = 0; i < directory.holders.size(); ++i)
      if (directory.holders[i].gpus.count(pci)) slot(static_cast<int>(i));

    for (auto& [holder, entry] : per) {
      entry.gpu.pci_address = pci;
      if (holder == kNobody) {
        snapshot.unattributed_processes += entry.gpu.processes;
        snapshot.unattributed_memory += entry.gpu.memory_bytes;
        snapshot.unattributed_sm_percent += entry.gpu.sm_percent;
        snapshot.unattributed += entry.gpu.delta;
        continue;
      }
      int& at = holder_slot[static_cast<size_t>(holder)];
      if (at < 0) {
        at = static_cast<int>(result.holders.size());
        result.holders.push_back(HolderReading{static_cast<size_t>(holder), {}, {}});
      }
      auto& out = result.holders[static_cast<size_t>(at)];
      out.delta += entry.gpu.delta;
      out.gpus.push_back(std::move(entry.gpu));
    }
    cursor.sample_us = newest;
    cursor.sampled_ms = now_ms;
    snapshot.cursor = cursor;
    result.gpus.push_back(std::move(snapshot));
  }
  for (auto& holder : result.holders)
    std::sort(holder.gpus.begin(), holder.gpus.end(),
              [](const HolderGpu& a, const HolderGpu& b) { return a.pci_address < b.pci_address; });
  return result;
}

}  // namespace tessera::telemetry

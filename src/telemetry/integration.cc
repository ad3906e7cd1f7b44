// One pass's readings -> who used what: attribution of every process to a holder (or to nobody)
// and the measured use since the GPU's cursor. Pure.
//
// SM-seconds come from NVML's per-process samples: each sample is one process's SM use over one
// of the driver's sample periods, and covers that period only (a process idle in a period has no
// sample in it, so the time since its previous sample is not its). The period is the spacing of
// the driver's GPU utilisation samples; without them, the closest spacing of this pass's
// samples, and never more than 1 s (NVML: "between 1 second and 1/6 second"). On a GPU in MIG
// mode there are no per-process samples; GPM's SM utilisation of each GPU instance over the pass
// goes to the processes in that instance. Memory GiB-seconds are the memory a process holds at
// the pass times the time it held it since the previous pass (from its start when it started
// since). Energy is the counter's delta, bounded by the power limit over the interval: the busy
// part (the share of the interval the SMs were in use) split by SM-seconds, the idle part by
// allocation among the GPU's holders, each for the part of the interval it held the GPU.
//
// Readings are bounded by what one GPU can do, each bound counted (Clamps): a (pid, timestamp)
// sample once, a sample period's SM use summed over processes at most 100 %, a process's memory
// and the sum at most the GPU's, energy at most power limit × interval.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <unordered_map>

#include "telemetry/telemetry.h"

namespace tessera::telemetry {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr int kNobody = -1;
// NVML's sample periods are "between 1 second and 1/6 second, depending on the product".
constexpr uint64_t kMaxSamplePeriodUs = 1'000'000;
// Bounds where the board does not tell: no GPU has more memory than this, nor draws more power.
constexpr uint64_t kMaxBoardMemory = 1ull << 40;
constexpr double kMaxBoardWatts = 1500;
// An energy delta up to this much over power limit × interval is the sensor's accuracy and the
// reads' timing (cut to the bound); beyond it the counter is not to be believed.
constexpr double kEnergyTolerance = 1.10;

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

Clamps& Clamps::operator+=(const Clamps& other) {
  duplicate_samples += other.duplicate_samples;
  sm_over_gpu += other.sm_over_gpu;
  memory_over_total += other.memory_over_total;
  energy_over_limit += other.energy_over_limit;
  energy_refused += other.energy_refused;
  stale_samples += other.stale_samples;
  return *this;
}

PassResult Integrate(const std::vector<GpuReading>& readings, const PidContainers& pids,
                     const Directory& directory, Cursors& cursors, int64_t now_ms,
                     const IntegrationOptions& options) {
  PassResult result;
  result.time_ms = now_ms;
  const HolderIndex index(directory);
  const double max_gap_s = std::chrono::duration<double>(options.max_gap).count();
  static const PidInfo kGone;
  auto info_of = [&](uint32_t pid) -> const PidInfo& {
    auto it = pids.find(pid);
    return it == pids.end() ? kGone : it->second;
  };
  std::unordered_map<uint32_t, int> holder_of_pid;
  // A live process's holder; a PID that is gone is nobody's.
  auto holder_of = [&](uint32_t pid) {
    auto cached = holder_of_pid.find(pid);
    if (cached != holder_of_pid.end()) return cached->second;
    const PidInfo& info = info_of(pid);
    const int holder = info.start_ms < 0 ? kNobody : index.Find(info.container);
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
    Clamps& clamps = snapshot.clamps;
    // This GPU's time: when it was read (its energy counter with it), else the pass's.
    const int64_t gpu_ms = reading.read_ms > 0 ? reading.read_ms : now_ms;
    const bool first_pass = cursor.sampled_ms <= 0;
    const int64_t from_ms = cursor.sampled_ms;
    const double dt_s = first_pass ? 0.0 : std::max<int64_t>(0, gpu_ms - from_ms) / 1000.0;
    std::unordered_map<int, PerHolder> per;  // holder (or kNobody) on this GPU
    auto slot = [&](int holder) -> PerHolder& {
      PerHolder& entry = per[holder];
      entry.present = true;
      return entry;
    };

    // Memory: each process at most the GPU's, all of them together too.
    uint64_t memory_total = reading.memory_total.value_or(0);
    if (memory_total == 0)
      for (const auto& instance : reading.mig_instances)
        memory_total += instance.memory_total;
    if (memory_total == 0) memory_total = kMaxBoardMemory;
    std::vector<uint64_t> held_bytes;
    held_bytes.reserve(reading.processes.size());
    double bytes_sum = 0;
    for (const auto& process : reading.processes) {
      uint64_t bytes = process.used_bytes.value_or(0);
      if (bytes > memory_total) {
        bytes = memory_total;
        ++clamps.memory_over_total;
      }
      held_bytes.push_back(bytes);
      bytes_sum += static_cast<double>(bytes);
    }
    double memory_scale = 1.0;
    if (bytes_sum > static_cast<double>(memory_total)) {
      memory_scale = static_cast<double>(memory_total) / bytes_sum;
      ++clamps.memory_over_total;
    }
    for (size_t i = 0; i < reading.processes.size(); ++i) {
      const auto& process = reading.processes[i];
      const uint64_t bytes =
          static_cast<uint64_t>(static_cast<double>(held_bytes[i]) * memory_scale);
      PerHolder& entry = slot(holder_of(process.pid));
      entry.gpu.processes++;
      entry.gpu.memory_bytes += bytes;
      entry.gpu.process_list.push_back({process.pid, bytes});
      if (first_pass) continue;
      // Held since the previous pass, or since it started when that was later; a process whose
      // start nobody knows (it is gone) at most max_gap.
      const PidInfo& info = info_of(process.pid);
      const double held_s =
          info.start_ms >= 0
              ? std::max<int64_t>(0, gpu_ms - std::max(from_ms, info.start_ms)) / 1000.0
              : std::min(dt_s, max_gap_s);
      entry.gpu.delta.memory_gib_seconds += static_cast<double>(bytes) / kGiB * held_s;
    }

    // SM use: per-process samples (whole GPUs), GPM per GPU instance (MIG).
    const uint64_t gpu_us = static_cast<uint64_t>(std::max<int64_t>(0, gpu_ms)) * 1000;
    uint64_t newest = cursor.sample_us;
    // (timestamp, pid) -> SM %, newer than the cursor and not from the future (those wait for a
    // later pass); a pair listed twice counts once.
    std::map<std::pair<uint64_t, uint32_t>, uint32_t> samples;
    for (const auto& sample : reading.samples) {
      if (sample.timestamp_us <= cursor.sample_us || sample.timestamp_us > gpu_us) continue;
      auto [it, inserted] =
          samples.try_emplace({sample.timestamp_us, sample.pid}, sample.sm_percent);
      if (inserted) continue;
      ++clamps.duplicate_samples;
      it->second = std::max(it->second, sample.sm_percent);
    }
    // The driver's period; without it, the closest spacing of distinct timestamps seen here.
    uint64_t period_us = std::min(reading.sample_period_us, kMaxSamplePeriodUs);
    if (period_us == 0) {
      uint64_t previous = cursor.sample_us, closest = 0;
      for (const auto& [key, sm] : samples) {
        if (previous != 0 && key.first > previous &&
            (closest == 0 || key.first - previous < closest))
          closest = key.first - previous;
        previous = key.first;
      }
      if (closest == 0) closest = static_cast<uint64_t>(dt_s * 1e6);
      period_us = std::min(closest == 0 ? kMaxSamplePeriodUs : closest, kMaxSamplePeriodUs);
    }
    std::unordered_map<uint32_t, std::pair<uint64_t, double>> latest;  // pid -> (ts, sm)
    uint64_t previous = cursor.sample_us;
    for (auto it = samples.begin(); it != samples.end();) {
      // One sample period: its processes' SM use together at most the whole GPU.
      const uint64_t ts = it->first.first;
      auto end = it;
      double sum = 0;
      for (; end != samples.end() && end->first.first == ts; ++end)
        sum += end->second;
      const double scale = sum > 100.0 ? 100.0 / sum : 1.0;
      if (sum > 100.0) ++clamps.sm_over_gpu;
      // It covers the driver's period, never more than the time since the previous sample.
      const uint64_t covered_us = previous == 0 ? period_us : std::min(period_us, ts - previous);
      for (; it != end; ++it) {
        const uint32_t pid = it->first.second;
        const double sm = it->second * scale;
        const PidInfo& info = info_of(pid);
        // A sample from before its PID's process started was another process's.
        const bool stale = info.start_ms < 0 || static_cast<uint64_t>(info.start_ms) * 1000 >= ts;
        if (stale) ++clamps.stale_samples;
        const int holder = stale ? kNobody : holder_of(pid);
        auto& last = latest[pid];
        if (ts >= last.first) last = {ts, sm};
        // The first pass only sets the cursor: what came before it was nobody's to count.
        if (!first_pass)
          slot(holder).sm_seconds += static_cast<double>(covered_us) / 1e6 * sm / 100.0;
      }
      previous = ts;
      newest = std::max(newest, ts);
    }
    for (const auto& [pid, last] : latest) {
      const PidInfo& info = info_of(pid);
      const bool stale =
          info.start_ms < 0 || static_cast<uint64_t>(info.start_ms) * 1000 >= last.first;
      slot(stale ? kNobody : holder_of(pid)).gpu.sm_percent += last.second;
      snapshot.sm_percent += last.second;
    }
    for (const auto& instance : reading.mig_instances) {
      if (!instance.sm_percent) continue;
      // The instance's SM use in GPU units, to its processes by their memory (one holder per
      // instance in practice), to nobody when it has none.
      const double gpu_percent = std::clamp(*instance.sm_percent, 0.0, 100.0) * instance.share;
      snapshot.sm_percent += gpu_percent;
      std::vector<std::pair<int, double>> weights;
      double total = 0;
      for (const auto& process : reading.processes) {
        if (process.gpu_instance_id != instance.gpu_instance_id ||
            process.compute_instance_id != instance.compute_instance_id)
          continue;
        const double weight =
            static_cast<double>(std::min(process.used_bytes.value_or(0), memory_total)) + 1.0;
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
    snapshot.sm_percent = std::min(snapshot.sm_percent, 100.0);

    // Processes too short for any sample, from accounting: nobody can say whose they were (their
    // /proc entry is gone, its PID perhaps another process's now), so they count on the GPU as
    // unattributed. Each ended process once: it ended after the previous counted pass.
    if (!first_pass) {
      for (const auto& ended : reading.ended) {
        if (ended.running || latest.count(ended.pid)) continue;
        const uint64_t end_us = ended.start_us + ended.time_ms * 1000;
        if (end_us <= static_cast<uint64_t>(cursor.sampled_ms) * 1000 ||
            end_us > static_cast<uint64_t>(gpu_ms) * 1000)
          continue;
        PerHolder& entry = slot(kNobody);
        const double seconds = static_cast<double>(ended.time_ms) / 1000.0;
        entry.sm_seconds += seconds * std::min(ended.gpu_percent.value_or(0), 100u) / 100.0;
        entry.gpu.delta.memory_gib_seconds +=
            seconds *
            static_cast<double>(std::min(ended.max_memory_bytes.value_or(0), memory_total)) / kGiB;
      }
    }

    double sm_seconds_total = 0;
    for (auto& [holder, entry] : per) {
      entry.gpu.delta.sm_seconds = entry.sm_seconds;
      sm_seconds_total += entry.sm_seconds;
    }

    // Energy: the counter's delta over the interval since the cursor, at most what the board
    // may draw in it. A counter that went back (the driver reloaded) or jumped past that is
    // refused: a new baseline, nothing charged.
    double joules = 0;
    if (reading.energy_mj) {
      const double limit_w = reading.power_limit_mw && *reading.power_limit_mw > 0
                                 ? *reading.power_limit_mw / 1000.0
                                 : kMaxBoardWatts;
      const double bound = limit_w * dt_s;
      if (cursor.energy_mj > 0 && !first_pass) {
        if (*reading.energy_mj < cursor.energy_mj) {
          ++clamps.energy_refused;
          snapshot.refused.push_back("energy counter went back from " +
                                     std::to_string(cursor.energy_mj) + " to " +
                                     std::to_string(*reading.energy_mj) + " mJ");
        } else {
          const double delta = static_cast<double>(*reading.energy_mj - cursor.energy_mj) / 1000.0;
          if (delta > bound * kEnergyTolerance) {
            ++clamps.energy_refused;
            char why[160];
            std::snprintf(why, sizeof why, "energy counter rose %.0f J in %.3f s (limit %.0f W)",
                          delta, dt_s, limit_w);
            snapshot.refused.push_back(why);
          } else if (delta > bound) {
            ++clamps.energy_over_limit;
            joules = bound;
          } else {
            joules = delta;
          }
        }
      }
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
      // Idle energy by allocation: each holder of this GPU its share, for the part of the
      // interval it held it; what nobody holds (a free GPU, free MIG slices) is nobody's.
      double allocated = 0;
      std::vector<std::pair<int, double>> shares;
      for (size_t i = 0; i < directory.holders.size(); ++i) {
        const Holder& holder = directory.holders[i];
        auto it = holder.gpus.find(pci);
        if (it == holder.gpus.end() || it->second <= 0) continue;
        const double held =
            dt_s > 0 ? std::clamp((gpu_ms - std::max(from_ms, holder.since_ms)) / 1000.0 / dt_s,
                                  0.0, 1.0)
                     : 1.0;
        shares.emplace_back(static_cast<int>(i), it->second * held);
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
      entry.gpu.sm_percent = std::min(entry.gpu.sm_percent, 100.0);
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
    cursor.sampled_ms = gpu_ms;
    snapshot.cursor = cursor;
    result.gpus.push_back(std::move(snapshot));
  }
  for (auto& holder : result.holders)
    std::sort(holder.gpus.begin(), holder.gpus.end(),
              [](const HolderGpu& a, const HolderGpu& b) { return a.pci_address < b.pci_address; });
  return result;
}

}  // namespace tessera::telemetry

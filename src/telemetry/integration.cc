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

// What one pass knows of processes: their start and container, and so their holder.
class ProcessOwners {
 public:
  ProcessOwners(const PidContainers& pids, const Directory& directory)
      : pids_(pids), index_(directory) {}

  const PidInfo& Info(uint32_t pid) const {
    static const PidInfo kGone;
    auto it = pids_.find(pid);
    return it == pids_.end() ? kGone : it->second;
  }
  // A live process's holder; a PID that is gone is nobody's.
  int HolderOf(uint32_t pid) {
    auto cached = holder_of_pid_.find(pid);
    if (cached != holder_of_pid_.end()) return cached->second;
    const PidInfo& info = Info(pid);
    const int holder = info.start_ms < 0 ? kNobody : index_.Find(info.container);
    holder_of_pid_.emplace(pid, holder);
    return holder;
  }
  // A sample (at `timestamp_us`) from before its PID's process started was another process's.
  bool Stale(uint32_t pid, uint64_t timestamp_us) const {
    const PidInfo& info = Info(pid);
    return info.start_ms < 0 || static_cast<uint64_t>(info.start_ms) * 1000 >= timestamp_us;
  }

 private:
  const PidContainers& pids_;
  const HolderIndex index_;
  std::unordered_map<uint32_t, int> holder_of_pid_;
};

// One GPU's part of the pass: its reading, its cursor, and what each holder (or kNobody) used.
struct GpuIntegration {
  const GpuReading& reading;
  GpuCursor& cursor;
  GpuSnapshot& snapshot;
  ProcessOwners& owners;
  // This GPU's time: when it was read (its energy counter with it), else the pass's.
  int64_t gpu_ms = 0;
  bool first_pass = false;
  int64_t from_ms = 0;
  double dt_s = 0;
  uint64_t memory_total = 0;
  std::unordered_map<int, PerHolder> per;  // holder (or kNobody) on this GPU

  PerHolder& Slot(int holder) {
    PerHolder& entry = per[holder];
    entry.present = true;
    return entry;
  }
};

// (timestamp, pid) -> SM %.
using SampleMap = std::map<std::pair<uint64_t, uint32_t>, uint32_t>;
// pid -> (timestamp, SM %) of its newest sample.
using NewestSamples = std::unordered_map<uint32_t, std::pair<uint64_t, double>>;

// The GPU's memory: the board's, else its MIG instances' together, else the largest any board has.
uint64_t MemoryTotal(const GpuReading& reading) {
  uint64_t memory_total = reading.memory_total.value_or(0);
  if (memory_total == 0)
    for (const auto& instance : reading.mig_instances)
      memory_total += instance.memory_total;
  if (memory_total == 0) memory_total = kMaxBoardMemory;
  return memory_total;
}

// Memory: each process at most the GPU's, all of them together too.
void AttributeMemory(GpuIntegration& g, double max_gap_s) {
  Clamps& clamps = g.snapshot.clamps;
  const auto& processes = g.reading.processes;
  std::vector<uint64_t> held_bytes;
  held_bytes.reserve(processes.size());
  double bytes_sum = 0;
  for (const auto& process : processes) {
    uint64_t bytes = process.used_bytes.value_or(0);
    if (bytes > g.memory_total) {
      bytes = g.memory_total;
      ++clamps.memory_over_total;
    }
    held_bytes.push_back(bytes);
    bytes_sum += static_cast<double>(bytes);
  }
  double memory_scale = 1.0;
  if (bytes_sum > static_cast<double>(g.memory_total)) {
    memory_scale = static_cast<double>(g.memory_total) / bytes_sum;
    ++clamps.memory_over_total;
  }
  for (size_t i = 0; i < processes.size(); ++i) {
    const auto& process = processes[i];
    const uint64_t bytes = static_cast<uint64_t>(static_cast<double>(held_bytes[i]) * memory_scale);
    PerHolder& entry = g.Slot(g.owners.HolderOf(process.pid));
    entry.gpu.processes++;
    entry.gpu.memory_bytes += bytes;
    entry.gpu.process_list.push_back({process.pid, bytes});
    if (g.first_pass) continue;
    // Held since the previous pass, or since it started when that was later; a process whose
    // start nobody knows (it is gone) at most max_gap.
    const PidInfo& info = g.owners.Info(process.pid);
    const double held_s =
        info.start_ms >= 0
            ? std::max<int64_t>(0, g.gpu_ms - std::max(g.from_ms, info.start_ms)) / 1000.0
            : std::min(g.dt_s, max_gap_s);
    entry.gpu.delta.memory_gib_seconds += static_cast<double>(bytes) / kGiB * held_s;
  }
}

// The samples newer than the cursor and not from the future (those wait for a later pass); a
// pair listed twice counts once.
SampleMap CollectSamples(GpuIntegration& g) {
  const uint64_t gpu_us = static_cast<uint64_t>(std::max<int64_t>(0, g.gpu_ms)) * 1000;
  SampleMap samples;
  for (const auto& sample : g.reading.samples) {
    if (sample.timestamp_us <= g.cursor.sample_us || sample.timestamp_us > gpu_us) continue;
    auto [it, inserted] = samples.try_emplace({sample.timestamp_us, sample.pid}, sample.sm_percent);
    if (inserted) continue;
    ++g.snapshot.clamps.duplicate_samples;
    it->second = std::max(it->second, sample.sm_percent);
  }
  return samples;
}

// The driver's period; without it, the closest spacing of distinct timestamps seen here.
uint64_t SamplePeriodUs(const GpuIntegration& g, const SampleMap& samples) {
  uint64_t period_us = std::min(g.reading.sample_period_us, kMaxSamplePeriodUs);
  if (period_us != 0) return period_us;
  uint64_t previous = g.cursor.sample_us, closest = 0;
  for (const auto& [key, sm] : samples) {
    if (previous != 0 && key.first > previous && (closest == 0 || key.first - previous < closest))
      closest = key.first - previous;
    previous = key.first;
  }
  if (closest == 0) closest = static_cast<uint64_t>(g.dt_s * 1e6);
  return std::min(closest == 0 ? kMaxSamplePeriodUs : closest, kMaxSamplePeriodUs);
}

// SM use of whole GPUs, from per-process samples: each covers one sample period. Returns the
// newest sample's timestamp (the cursor's, when none is newer); `newest` gets each PID's.
uint64_t AttributeSamples(GpuIntegration& g, const SampleMap& samples, uint64_t period_us,
                          NewestSamples& newest_of) {
  uint64_t newest = g.cursor.sample_us;
  uint64_t previous = g.cursor.sample_us;
  for (auto it = samples.begin(); it != samples.end();) {
    // One sample period: its processes' SM use together at most the whole GPU.
    const uint64_t ts = it->first.first;
    auto end = it;
    double sum = 0;
    for (; end != samples.end() && end->first.first == ts; ++end)
      sum += end->second;
    const double scale = sum > 100.0 ? 100.0 / sum : 1.0;
    if (sum > 100.0) ++g.snapshot.clamps.sm_over_gpu;
    // It covers the driver's period, never more than the time since the previous sample.
    const uint64_t covered_us = previous == 0 ? period_us : std::min(period_us, ts - previous);
    for (; it != end; ++it) {
      const uint32_t pid = it->first.second;
      const double sm = it->second * scale;
      const bool stale = g.owners.Stale(pid, ts);
      if (stale) ++g.snapshot.clamps.stale_samples;
      const int holder = stale ? kNobody : g.owners.HolderOf(pid);
      auto& last = newest_of[pid];
      if (ts >= last.first) last = {ts, sm};
      // The first pass only sets the cursor: what came before it was nobody's to count.
      if (!g.first_pass)
        g.Slot(holder).sm_seconds += static_cast<double>(covered_us) / 1e6 * sm / 100.0;
    }
    previous = ts;
    newest = std::max(newest, ts);
  }
  return newest;
}

// The SM % now: each process's newest sample.
void AddCurrentSm(GpuIntegration& g, const NewestSamples& newest_of) {
  for (const auto& [pid, last] : newest_of) {
    const bool stale = g.owners.Stale(pid, last.first);
    g.Slot(stale ? kNobody : g.owners.HolderOf(pid)).gpu.sm_percent += last.second;
    g.snapshot.sm_percent += last.second;
  }
}

// MIG: each GPU instance's SM use in GPU units, to its processes by their memory (one holder
// per instance in practice), to nobody when it has none.
void AttributeMigInstances(GpuIntegration& g) {
  for (const auto& instance : g.reading.mig_instances) {
    if (!instance.sm_percent) continue;
    const double gpu_percent = std::clamp(*instance.sm_percent, 0.0, 100.0) * instance.share;
    g.snapshot.sm_percent += gpu_percent;
    std::vector<std::pair<int, double>> weights;
    double total = 0;
    for (const auto& process : g.reading.processes) {
      if (process.gpu_instance_id != instance.gpu_instance_id ||
          process.compute_instance_id != instance.compute_instance_id)
        continue;
      const double weight =
          static_cast<double>(std::min(process.used_bytes.value_or(0), g.memory_total)) + 1.0;
      weights.emplace_back(g.owners.HolderOf(process.pid), weight);
      total += weight;
    }
    if (weights.empty()) weights.emplace_back(kNobody, total = 1.0);
    for (const auto& [holder, weight] : weights) {
      PerHolder& entry = g.Slot(holder);
      entry.gpu.sm_percent += gpu_percent * weight / total;
      entry.sm_seconds += g.dt_s * gpu_percent / 100.0 * weight / total;
    }
  }
}

// Processes too short for any sample, from accounting: nobody can say whose they were (their
// /proc entry is gone, its PID perhaps another process's now), so they count on the GPU as
// unattributed. Each ended process once: it ended after the previous counted pass.
void AttributeEnded(GpuIntegration& g, const NewestSamples& newest_of) {
  if (g.first_pass) return;
  for (const auto& ended : g.reading.ended) {
    if (ended.running || newest_of.count(ended.pid)) continue;
    const uint64_t end_us = ended.start_us + ended.time_ms * 1000;
    if (end_us <= static_cast<uint64_t>(g.cursor.sampled_ms) * 1000 ||
        end_us > static_cast<uint64_t>(g.gpu_ms) * 1000)
      continue;
    PerHolder& entry = g.Slot(kNobody);
    const double seconds = static_cast<double>(ended.time_ms) / 1000.0;
    entry.sm_seconds += seconds * std::min(ended.gpu_percent.value_or(0), 100u) / 100.0;
    entry.gpu.delta.memory_gib_seconds +=
        seconds *
        static_cast<double>(std::min(ended.max_memory_bytes.value_or(0), g.memory_total)) / kGiB;
  }
}

// Energy: the counter's delta over the interval since the cursor, at most what the board may
// draw in it. A counter that went back (the driver reloaded) or jumped past that is refused: a
// new baseline, nothing charged. Returns the joules charged; the cursor takes the counter.
double MeasureEnergy(GpuIntegration& g) {
  const GpuReading& reading = g.reading;
  if (!reading.energy_mj) return 0;
  double joules = 0;
  const double limit_w = reading.power_limit_mw && *reading.power_limit_mw > 0
                             ? *reading.power_limit_mw / 1000.0
                             : kMaxBoardWatts;
  const double bound = limit_w * g.dt_s;
  Clamps& clamps = g.snapshot.clamps;
  if (g.cursor.energy_mj > 0 && !g.first_pass) {
    if (*reading.energy_mj < g.cursor.energy_mj) {
      ++clamps.energy_refused;
      g.snapshot.refused.push_back("energy counter went back from " +
                                   std::to_string(g.cursor.energy_mj) + " to " +
                                   std::to_string(*reading.energy_mj) + " mJ");
    } else {
      const double delta = static_cast<double>(*reading.energy_mj - g.cursor.energy_mj) / 1000.0;
      if (delta > bound * kEnergyTolerance) {
        ++clamps.energy_refused;
        char why[160];
        std::snprintf(why, sizeof why, "energy counter rose %.0f J in %.3f s (limit %.0f W)", delta,
                      g.dt_s, limit_w);
        g.snapshot.refused.push_back(why);
      } else if (delta > bound) {
        ++clamps.energy_over_limit;
        joules = bound;
      } else {
        joules = delta;
      }
    }
  }
  g.cursor.energy_mj = *reading.energy_mj;
  return joules;
}

// The busy part of `joules` (the share of the interval the SMs were in use) split by
// SM-seconds; the idle part by allocation: each holder of this GPU its share, for the part of
// the interval it held it; what nobody holds (a free GPU, free MIG slices) is nobody's.
void SplitEnergy(GpuIntegration& g, const Directory& directory, double joules,
                 double sm_seconds_total) {
  const double dt_s = g.dt_s;
  const double busy = dt_s > 0 ? std::clamp(sm_seconds_total / dt_s, 0.0, 1.0) : 0.0;
  const double active = joules * busy;
  const double idle = joules - active;
  if (sm_seconds_total > 0) {
    for (auto& [holder, entry] : g.per)
      entry.gpu.delta.energy_joules += active * entry.sm_seconds / sm_seconds_total;
  }
  const std::string& pci = g.reading.identity.pci_address;
  double allocated = 0;
  std::vector<std::pair<int, double>> shares;
  for (size_t i = 0; i < directory.holders.size(); ++i) {
    const Holder& holder = directory.holders[i];
    auto it = holder.gpus.find(pci);
    if (it == holder.gpus.end() || it->second <= 0) continue;
    const double held =
        dt_s > 0 ? std::clamp((g.gpu_ms - std::max(g.from_ms, holder.since_ms)) / 1000.0 / dt_s,
                              0.0, 1.0)
                 : 1.0;
    shares.emplace_back(static_cast<int>(i), it->second * held);
    allocated += it->second;
  }
  const double scale = allocated > 1.0 ? 1.0 / allocated : 1.0;
  double given = 0;
  for (const auto& [holder, share] : shares) {
    g.Slot(holder).gpu.delta.energy_joules += idle * share * scale;
    given += idle * share * scale;
  }
  g.Slot(kNobody).gpu.delta.energy_joules += std::max(0.0, idle - given);
}

// Each holder's use of this GPU into the pass's result (holder_slot: holder index -> its
// readings, in the order holders first appear); nobody's into the GPU's unattributed figures.
void CollectHolders(GpuIntegration& g, std::vector<int>& holder_slot, PassResult& result) {
  GpuSnapshot& snapshot = g.snapshot;
  for (auto& [holder, entry] : g.per) {
    entry.gpu.pci_address = g.reading.identity.pci_address;
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
}

// One GPU that answered: its memory, SM use and energy to holders, its cursor moved on.
void IntegrateGpu(GpuIntegration& g, const Directory& directory, double max_gap_s,
                  std::vector<int>& holder_slot, PassResult& result) {
  AttributeMemory(g, max_gap_s);
  // SM use: per-process samples (whole GPUs), GPM per GPU instance (MIG).
  const SampleMap samples = CollectSamples(g);
  NewestSamples newest_of;
  const uint64_t newest = AttributeSamples(g, samples, SamplePeriodUs(g, samples), newest_of);
  AddCurrentSm(g, newest_of);
  AttributeMigInstances(g);
  g.snapshot.sm_percent = std::min(g.snapshot.sm_percent, 100.0);
  AttributeEnded(g, newest_of);

  double sm_seconds_total = 0;
  for (auto& [holder, entry] : g.per) {
    entry.gpu.delta.sm_seconds = entry.sm_seconds;
    sm_seconds_total += entry.sm_seconds;
  }
  const double joules = MeasureEnergy(g);
  if (g.dt_s > 0 && joules > 0)
    g.snapshot.power_watts = joules / g.dt_s;
  else if (g.reading.power_mw)
    g.snapshot.power_watts = *g.reading.power_mw / 1000.0;
  if (joules > 0) SplitEnergy(g, directory, joules, sm_seconds_total);

  // Holders that hold this GPU show up even while idle.
  for (size_t i = 0; i < directory.holders.size(); ++i)
    if (directory.holders[i].gpus.count(g.reading.identity.pci_address))
      g.Slot(static_cast<int>(i));

  CollectHolders(g, holder_slot, result);
  g.cursor.sample_us = newest;
  g.cursor.sampled_ms = g.gpu_ms;
  g.snapshot.cursor = g.cursor;
}

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
  ProcessOwners owners(pids, directory);
  const double max_gap_s = std::chrono::duration<double>(options.max_gap).count();
  // Holder index -> its readings, in the order holders first appear.
  std::vector<int> holder_slot(directory.holders.size(), -1);
  for (const GpuReading& reading : readings) {
    GpuSnapshot snapshot;
    snapshot.reading = reading;
    GpuCursor& cursor = cursors[reading.identity.pci_address];
    if (reading.lost) {
      snapshot.cursor = cursor;
      result.gpus.push_back(std::move(snapshot));
      continue;
    }
    const int64_t gpu_ms = reading.read_ms > 0 ? reading.read_ms : now_ms;
    const bool first_pass = cursor.sampled_ms <= 0;
    GpuIntegration g{
        .reading = reading,
        .cursor = cursor,
        .snapshot = snapshot,
        .owners = owners,
        .gpu_ms = gpu_ms,
        .first_pass = first_pass,
        .from_ms = cursor.sampled_ms,
        .dt_s = first_pass ? 0.0 : std::max<int64_t>(0, gpu_ms - cursor.sampled_ms) / 1000.0,
        .memory_total = MemoryTotal(reading),
        .per = {},
    };
    IntegrateGpu(g, directory, max_gap_s, holder_slot, result);
    result.gpus.push_back(std::move(snapshot));
  }
  for (auto& holder : result.holders)
    std::sort(holder.gpus.begin(), holder.gpus.end(),
              [](const HolderGpu& a, const HolderGpu& b) { return a.pci_address < b.pci_address; });
  return result;
}

}  // namespace tessera::telemetry

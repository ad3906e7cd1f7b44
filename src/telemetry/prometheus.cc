// The node endpoint's series, in the Prometheus text format (version 0.0.4). Names and labels
// follow dcgm-exporter where the meaning is the same, so existing Grafana panels keep working:
//   DCGM_FI_DEV_GPU_UTIL (%), DCGM_FI_DEV_MEM_COPY_UTIL (%), DCGM_FI_DEV_FB_USED / _FB_FREE (MiB),
//   DCGM_FI_DEV_POWER_USAGE (W), DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION (mJ, counter),
//   DCGM_FI_DEV_GPU_TEMP (C), DCGM_FI_DEV_XID_ERRORS (the last Xid), DCGM_FI_PROF_SM_ACTIVE
//   (ratio, MIG instances, from GPM), labelled gpu, UUID, pci_bus_id, device, modelName,
//   Hostname (+ GPU_I_ID, GPU_I_PROFILE per MIG instance; + pod, namespace, container per
//   container, as dcgm-exporter's per-process series). tessera_* for what dcgm-exporter lacks.
// Per-container series are capped: beyond max_series the rest is summed into container="_other".
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>

#include "telemetry/telemetry.h"

namespace tessera::telemetry {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// A label value in the text format: backslash, double quote and newline escaped.
void AppendEscaped(std::string& out, std::string_view value) {
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
}

void AppendNumber(std::string& out, double value) {
  char text[32];
  // Integers print exactly; fractions with enough digits to round-trip a counter's growth.
  if (value == static_cast<double>(static_cast<int64_t>(value)) && std::abs(value) < 1e15) {
    std::snprintf(text, sizeof text, "%" PRId64, static_cast<int64_t>(value));
  } else {
    std::snprintf(text, sizeof text, "%.6g", value);
    if (std::abs(value) >= 1e5) std::snprintf(text, sizeof text, "%.3f", value);
  }
  out += text;
}

// "0000:18:00.0" -> "00000000:18:00.0", as NVML prints bus IDs (and dcgm-exporter labels them).
std::string NvmlBusId(std::string_view pci) {
  std::string out = pci.size() == 12 ? "0000" + std::string(pci) : std::string(pci);
  for (char& c : out)
    if (c >= 'a' && c <= 'f') c = static_cast<char>(c - 'a' + 'A');
  return out;
}

struct Family {
  const char* name;
  const char* type;
  const char* help;
};

// Families in the order they are rendered; a sample is added to its family's body.
enum FamilyId {
  kGpuUtil,
  kMemCopyUtil,
  kFbUsed,
  kFbFree,
  kPower,
  kEnergy,
  kTemp,
  kXid,
  kSmActive,
  kGpuLost,
  kUnattributedProcesses,
  kUnattributedMemory,
  kUnattributedSm,
  kHolderSm,
  kHolderProcesses,
  kHolderSmSeconds,
  kHolderMemorySeconds,
  kHolderEnergy,
  kHolderSeries,
  kHoldersFolded,
  kClamped,
  kFamilyCount
};

constexpr Family kFamilies[kFamilyCount] = {
    {"DCGM_FI_DEV_GPU_UTIL", "gauge",
     "GPU utilization (in %); per container: its processes' SM use."},
    {"DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."},
    {"DCGM_FI_DEV_FB_USED", "gauge",
     "Framebuffer memory used (in MiB); per container: its processes'."},
    {"DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."},
    {"DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."},
    {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter",
     "Total energy consumption since boot (in mJ)."},
    {"DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."},
    {"DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."},
    {"DCGM_FI_PROF_SM_ACTIVE", "gauge",
     "Ratio of cycles the SMs of a MIG instance were active (NVML GPM SM utilization)."},
    {"tessera_gpu_lost", "gauge", "1 when NVML answers GPU_IS_LOST for the GPU."},
    {"tessera_gpu_unattributed_processes", "gauge",
     "GPU processes whose cgroup names no container tessera knows (never given to a tenant)."},
    {"tessera_gpu_unattributed_memory_bytes", "gauge", "GPU memory held by those processes."},
    {"tessera_gpu_unattributed_sm_utilization", "gauge",
     "SM use (in % of the GPU) by those processes."},
    {"tessera_container_sm_utilization", "gauge",
     "SM use (in % of the whole GPU) by a container's processes; MIG instances by GPM."},
    {"tessera_container_gpu_processes", "gauge", "A container's processes on the GPU."},
    {"tessera_container_sm_seconds_total", "counter",
     "Measured SM-seconds of a container (a whole GPU's SMs busy for one second is 1)."},
    {"tessera_container_memory_gib_seconds_total", "counter",
     "Measured GPU memory of a container, GiB-seconds."},
    {"tessera_container_energy_joules_total", "counter",
     "GPU energy of a container: the busy part by SM share, the idle part by allocation."},
    {"tessera_telemetry_container_series", "gauge",
     "Per-container series on this endpoint (at most --telemetry-max-series)."},
    {"tessera_telemetry_containers_in_other", "gauge",
     "Containers beyond the cap, summed into container=\"_other\"."},
    {"tessera_telemetry_readings_clamped_total", "counter",
     "NVML readings bounded or refused before metering, by kind: duplicate_sample, "
     "sm_over_gpu, memory_over_total, energy_over_limit, energy_refused, stale_sample."},
};

class Writer {
 public:
  void Sample(FamilyId family, const std::string& labels, double value) {
    std::string& body = bodies_[family];
    body += kFamilies[family].name;
    body += '{';
    body += labels;
    body += "} ";
    AppendNumber(body, value);
    body += '\n';
  }
  std::string Text() const {
    std::string out;
    size_t size = 0;
    for (const auto& body : bodies_)
      size += body.size() + 200;
    out.reserve(size);
    for (int i = 0; i < kFamilyCount; ++i) {
      if (bodies_[i].empty()) continue;
      out += "# HELP ";
      out += kFamilies[i].name;
      out += ' ';
      out += kFamilies[i].help;
      out += "\n# TYPE ";
      out += kFamilies[i].name;
      out += ' ';
      out += kFamilies[i].type;
      out += '\n';
      out += bodies_[i];
    }
    return out;
  }

 private:
  std::string bodies_[kFamilyCount];
};

std::string GpuLabels(const GpuIdentity& gpu, const std::string& hostname) {
  std::string out = "gpu=\"" + std::to_string(gpu.index) + "\",UUID=\"";
  AppendEscaped(out, gpu.uuid);
  out += "\",pci_bus_id=\"" + NvmlBusId(gpu.pci_address) + "\",device=\"";
  out += gpu.minor >= 0 ? "nvidia" + std::to_string(gpu.minor) : "";
  out += "\",modelName=\"";
  AppendEscaped(out, gpu.model);
  out += "\",Hostname=\"";
  AppendEscaped(out, hostname);
  out += '"';
  return out;
}

std::string HolderLabels(const Holder& holder) {
  std::string out = "pod=\"";
  AppendEscaped(out, holder.pod);
  out += "\",namespace=\"";
  AppendEscaped(out, holder.namespace_);
  out += "\",container=\"";
  AppendEscaped(out, holder.container);
  out += "\",tenancy=\"";
  AppendEscaped(out, holder.tenancy);
  out += '"';
  return out;
}

constexpr const char* kOtherLabels = R"(pod="",namespace="",container="_other",tenancy="")";

// A GPU's readings clamped or refused since this process started, by kind.
void RenderClamps(Writer& writer, const std::string& labels, const Clamps& c) {
  for (const auto& [kind, count] :
       {std::pair<const char*, uint64_t>{"duplicate_sample", c.duplicate_samples},
        {"sm_over_gpu", c.sm_over_gpu},
        {"memory_over_total", c.memory_over_total},
        {"energy_over_limit", c.energy_over_limit},
        {"energy_refused", c.energy_refused},
        {"stale_sample", c.stale_samples}})
    writer.Sample(kClamped, labels + ",reading=\"" + kind + "\"", static_cast<double>(count));
}

// A GPU that answered: its gauges, its energy counter, its last Xid and what nobody holds.
void RenderGpuReadings(Writer& writer, const std::string& labels, const GpuSnapshot& gpu) {
  const GpuReading& r = gpu.reading;
  if (r.gpu_percent && !r.mig) writer.Sample(kGpuUtil, labels, *r.gpu_percent);
  if (r.memory_percent && !r.mig) writer.Sample(kMemCopyUtil, labels, *r.memory_percent);
  if (r.memory_used) writer.Sample(kFbUsed, labels, std::floor(*r.memory_used / kMiB));
  if (r.memory_used && r.memory_total)
    writer.Sample(kFbFree, labels,
                  std::floor(static_cast<double>(*r.memory_total -
                                                 std::min(*r.memory_total, *r.memory_used)) /
                             kMiB));
  if (gpu.power_watts > 0 || r.power_mw) writer.Sample(kPower, labels, gpu.power_watts);
  if (r.energy_mj) writer.Sample(kEnergy, labels, static_cast<double>(*r.energy_mj));
  if (r.temperature_c) writer.Sample(kTemp, labels, *r.temperature_c);
  if (!r.xids.empty()) writer.Sample(kXid, labels, static_cast<double>(r.xids.back()));
  writer.Sample(kUnattributedProcesses, labels, gpu.unattributed_processes);
  writer.Sample(kUnattributedMemory, labels, static_cast<double>(gpu.unattributed_memory));
  if (!r.mig) writer.Sample(kUnattributedSm, labels, gpu.unattributed_sm_percent);
}

void RenderMigInstances(Writer& writer, const std::string& labels, const GpuReading& r) {
  for (const auto& instance : r.mig_instances) {
    std::string mig =
        labels + ",GPU_I_ID=\"" + std::to_string(instance.gpu_instance_id) + "\",GPU_I_PROFILE=\"";
    AppendEscaped(mig, instance.profile);
    mig += '"';
    writer.Sample(kFbUsed, mig, std::floor(instance.memory_used / kMiB));
    writer.Sample(
        kFbFree, mig,
        std::floor(static_cast<double>(instance.memory_total -
                                       std::min(instance.memory_total, instance.memory_used)) /
                   kMiB));
    if (instance.sm_percent) writer.Sample(kSmActive, mig, *instance.sm_percent / 100.0);
  }
}

// Every GPU's series; returns each GPU's labels by PCI address.
std::map<std::string, std::string> RenderGpus(Writer& writer, const std::vector<GpuSnapshot>& gpus,
                                              const std::map<std::string, Clamps>& clamps,
                                              const std::string& hostname) {
  std::map<std::string, std::string> labels_of_gpu;
  for (const auto& gpu : gpus) {
    const GpuReading& r = gpu.reading;
    const std::string labels = GpuLabels(r.identity, hostname);
    labels_of_gpu[r.identity.pci_address] = labels;
    writer.Sample(kGpuLost, labels, r.lost ? 1 : 0);
    if (auto it = clamps.find(r.identity.pci_address); it != clamps.end())
      RenderClamps(writer, labels, it->second);
    if (r.lost) continue;
    RenderGpuReadings(writer, labels, gpu);
    RenderMigInstances(writer, labels, r);
  }
  return labels_of_gpu;
}

// A holder seen recently: who, and its figures on each GPU.
struct RecentHolder {
  const Holder* holder;
  const std::vector<HolderGpu>* gpus;
};

// Most active first (SM %, then memory); equals keep their order.
void SortByActivity(std::vector<RecentHolder>& order) {
  auto activity = [](const RecentHolder& seen) {
    double sm = 0, memory = 0;
    for (const auto& gpu : *seen.gpus) {
      sm += gpu.sm_percent;
      memory += static_cast<double>(gpu.memory_bytes);
    }
    return std::pair(sm, memory);
  };
  std::stable_sort(order.begin(), order.end(), [&](const RecentHolder& a, const RecentHolder& b) {
    return activity(a) > activity(b);
  });
}

// The holder series of one Render: per GPU held (three on a MIG GPU, four on others) and the
// three counters.
class HolderSeriesWriter {
 public:
  HolderSeriesWriter(Writer& writer, const std::vector<GpuSnapshot>& gpus,
                     std::map<std::string, std::string> labels_of_gpu, const std::string& hostname)
      : writer_(writer), labels_of_gpu_(std::move(labels_of_gpu)) {
    for (const auto& gpu : gpus)
      mig_of_gpu_[gpu.reading.identity.pci_address] = gpu.reading.mig;
    std::string escaped;
    AppendEscaped(escaped, hostname);
    host_ = ",Hostname=\"" + escaped + "\"";
  }
  const std::string& host() const { return host_; }

  size_t SeriesOf(const RecentHolder& seen) {
    size_t n = 3;  // the three counters
    for (const auto& gpu : *seen.gpus)
      n += mig_of_gpu_[gpu.pci_address] ? 3 : 4;
    return n;
  }
  // How many of `order` get their own series within `max_series`; the rest go to _other.
  size_t ShownCount(const std::vector<RecentHolder>& order, size_t gpu_count, size_t max_series) {
    size_t total = 0;
    for (const auto& seen : order)
      total += SeriesOf(seen);
    if (total <= max_series) return order.size();
    // Room for _other's own series: every GPU's four, and its three counters.
    const size_t reserve = gpu_count * 4 + 3;
    const size_t budget = max_series > reserve ? max_series - reserve : 0;
    size_t used = 0, shown = 0;
    while (shown < order.size() && used + SeriesOf(order[shown]) <= budget)
      used += SeriesOf(order[shown++]);
    return shown;
  }
  // One holder's series; returns how many.
  size_t RenderHolder(const RecentHolder& seen, const Usage& total) {
    const std::string holder = HolderLabels(*seen.holder);
    for (const auto& gpu : *seen.gpus) {
      auto labels = labels_of_gpu_.find(gpu.pci_address);
      if (labels == labels_of_gpu_.end()) continue;
      GpuSamples(labels->second + "," + holder, gpu);
    }
    Counters(holder + host_, total);
    return SeriesOf(seen);
  }
  // The holders past the cap summed per GPU into container="_other"; returns how many series.
  size_t RenderOther(const std::vector<RecentHolder>& rest,
                     const std::map<std::string, HolderTotals>& totals) {
    std::map<std::string, HolderGpu> other;  // by PCI address
    Usage other_total;
    for (const auto& seen : rest) {
      for (const auto& gpu : *seen.gpus) {
        HolderGpu& sum = other[gpu.pci_address];
        sum.pci_address = gpu.pci_address;
        sum.processes += gpu.processes;
        sum.memory_bytes += gpu.memory_bytes;
        sum.sm_percent += gpu.sm_percent;
      }
      if (auto it = totals.find(seen.holder->key); it != totals.end())
        other_total += it->second.total;
    }
    size_t rendered = 0;
    for (const auto& [pci, gpu] : other) {
      auto labels = labels_of_gpu_.find(pci);
      if (labels == labels_of_gpu_.end()) continue;
      GpuSamples(labels->second + "," + kOtherLabels, gpu);
      rendered += mig_of_gpu_[pci] ? 3 : 4;
    }
    Counters(std::string(kOtherLabels) + host_, other_total);
    return rendered + 3;
  }

 private:
  void GpuSamples(const std::string& labels, const HolderGpu& gpu) {
    if (!mig_of_gpu_[gpu.pci_address]) writer_.Sample(kGpuUtil, labels, gpu.sm_percent);
    writer_.Sample(kFbUsed, labels, std::floor(gpu.memory_bytes / kMiB));
    writer_.Sample(kHolderSm, labels, gpu.sm_percent);
    writer_.Sample(kHolderProcesses, labels, gpu.processes);
  }
  void Counters(const std::string& labels, const Usage& usage) {
    writer_.Sample(kHolderSmSeconds, labels, usage.sm_seconds);
    writer_.Sample(kHolderMemorySeconds, labels, usage.memory_gib_seconds);
    writer_.Sample(kHolderEnergy, labels, usage.energy_joules);
  }

  Writer& writer_;
  const std::map<std::string, std::string> labels_of_gpu_;  // by PCI address
  std::map<std::string, bool> mig_of_gpu_;
  std::string host_;
};

}  // namespace

void NodeMetrics::Update(const PassResult& pass, const Directory& directory) {
  gpus_ = pass.gpus;
  for (const auto& gpu : pass.gpus)
    clamps_[gpu.reading.identity.pci_address] += gpu.clamps;
  for (const auto& reading : pass.holders) {
    const Holder& holder = directory.holders[reading.holder];
    Seen& seen = seen_[holder.key];
    seen.holder = holder;
    seen.gpus = reading.gpus;
    seen.last_ms = pass.time_ms;
  }
  // Holders not in this pass keep their last figures' counters for linger_ms, then leave.
  for (auto it = seen_.begin(); it != seen_.end();) {
    if (it->second.last_ms != pass.time_ms) it->second.gpus.clear();
    it = pass.time_ms - it->second.last_ms > options_.linger_ms ? seen_.erase(it) : std::next(it);
  }
}

std::vector<std::string> NodeMetrics::keys() const {
  std::vector<std::string> out;
  out.reserve(seen_.size());
  for (const auto& [key, seen] : seen_)
    out.push_back(key);
  return out;
}

std::string NodeMetrics::Render(const std::map<std::string, HolderTotals>& totals,
                                int64_t now_ms) const {
  Writer writer;
  HolderSeriesWriter holders(writer, gpus_, RenderGpus(writer, gpus_, clamps_, options_.hostname),
                             options_.hostname);
  // Holders, most active first, up to the cap; the rest summed per GPU into _other.
  std::vector<RecentHolder> order;
  order.reserve(seen_.size());
  for (const auto& [key, seen] : seen_)
    if (now_ms - seen.last_ms <= options_.linger_ms || seen.last_ms == now_ms)
      order.push_back({&seen.holder, &seen.gpus});
  SortByActivity(order);
  const size_t shown = holders.ShownCount(order, gpus_.size(), options_.max_series);
  size_t rendered = 0;
  for (size_t i = 0; i < shown; ++i) {
    auto it = totals.find(order[i].holder->key);
    rendered += holders.RenderHolder(order[i], it == totals.end() ? Usage{} : it->second.total);
  }
  if (shown < order.size())
    rendered += holders.RenderOther(
        {order.begin() + static_cast<std::ptrdiff_t>(shown), order.end()}, totals);
  const std::string host = holders.host().substr(1);
  writer.Sample(kHolderSeries, host, static_cast<double>(rendered));
  writer.Sample(kHoldersFolded, host, static_cast<double>(order.size() - shown));
  last_holder_series_ = rendered;
  return writer.Text();
}

}  // namespace tessera::telemetry

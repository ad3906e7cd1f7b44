#include "serve/measurement.h"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <set>

namespace tessera::serve {
namespace {

// The telemetry mode of a container that holds a share of a GPU (its series' `mode` label).
constexpr char kShareMode[] = "share";

// How a container holds its GPUs: the `mode` label of its series.
const char* ModeOf(const fleet::ContainerRecord& container) {
  return container.spec.share ? kShareMode : container.spec.mig.count > 0 ? "mig" : "gpu";
}

std::string Escaped(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

// Per-GPU errors, lost GPUs and what the pass refused to charge.
void LogPassProblems(const telemetry::PassResult& pass) {
  for (const auto& gpu : pass.gpus) {
    for (const auto& error : gpu.reading.errors)
      spdlog::debug("telemetry: GPU {}: {}", gpu.reading.identity.pci_address, error);
    if (gpu.reading.lost)
      spdlog::warn("telemetry: GPU {} is lost", gpu.reading.identity.pci_address);
    for (const auto& refused : gpu.refused)
      spdlog::warn("telemetry: GPU {}: {}: nothing charged", gpu.reading.identity.pci_address,
                   refused);
  }
}

// The GPUs' gauges of the dashboard from a pass (the tenancies' are added as holders are read).
std::shared_ptr<Gauges> GaugesOf(const telemetry::PassResult& pass, int64_t now_ms) {
  auto gauges = std::make_shared<Gauges>();
  gauges->time_ms = now_ms;
  for (const auto& gpu : pass.gpus) {
    const auto& r = gpu.reading;
    GpuGauges g;
    g.lost = r.lost;
    if (r.gpu_percent && !r.mig) g.util_percent = *r.gpu_percent;
    // A GPU in MIG mode has no GPU_UTIL: its instances' SM use (GPM) stands for it.
    if (r.mig) g.util_percent = std::min(100.0, gpu.sm_percent);
    g.memory_used = r.memory_used;
    g.memory_total = r.memory_total;
    if (gpu.power_watts > 0 || r.power_mw) g.power_watts = gpu.power_watts;
    gauges->gpus[r.identity.pci_address] = g;
  }
  return gauges;
}

// Power over the time each GPU's energy was measured over (a pass after a stall or a restart
// covers more than one interval): the seconds between a GPU's previous read and this one.
struct MeasuredSpan {
  const std::map<std::string, int64_t>& previous_ms;
  const telemetry::Cursors& cursors;
  double interval_s;

  double SecondsOf(const std::string& pci) const {
    auto before = previous_ms.find(pci);
    auto after = cursors.find(pci);
    if (before == previous_ms.end() || before->second <= 0 || after == cursors.end())
      return interval_s;
    const double seconds = (after->second.sampled_ms - before->second) / 1000.0;
    return seconds > 0 ? seconds : interval_s;
  }
};

// One holder's reading added to its tenancy's gauges and to its tenancy series'.
void AddHolderGauges(const telemetry::HolderReading& reading, const MeasuredSpan& span,
                     TenancyGauges& tenancy, TenancyGauges& series) {
  for (const auto& gpu : reading.gpus) {
    tenancy.sm_percent += gpu.sm_percent;
    tenancy.memory_bytes += gpu.memory_bytes;
    series.sm_percent += gpu.sm_percent;
    series.memory_bytes += gpu.memory_bytes;
  }
  for (const auto& gpu : reading.gpus) {
    const double watts = gpu.delta.energy_joules / span.SecondsOf(gpu.pci_address);
    tenancy.power_watts += watts;
    series.power_watts += watts;
  }
}

std::string SeriesLabels(const TenancySeriesKey& key) {
  return "tenancy=\"" + Escaped(std::get<0>(key)) + "\",gpu_model=\"" + Escaped(std::get<1>(key)) +
         "\",mode=\"" + Escaped(std::get<2>(key)) + "\"";
}

// The tenancy series' gauges of the last pass, in the exposition format.
void RenderTenancyGauges(const std::map<TenancySeriesKey, TenancyGauges>& tenancy_now,
                         std::string& out) {
  char line[512];
  struct Gauge {
    const char* name;
    const char* help;
    double (*value)(const TenancyGauges&);
  };
  for (const Gauge& gauge :
       {Gauge{"tessera_tenancy_sm_utilization",
              "SM use of a tenancy's processes now, in GPUs (1: one GPU's SMs busy).",
              [](const TenancyGauges& g) { return g.sm_percent / 100.0; }},
        Gauge{"tessera_tenancy_gpu_memory_bytes", "GPU memory a tenancy's processes hold now.",
              [](const TenancyGauges& g) { return static_cast<double>(g.memory_bytes); }},
        Gauge{"tessera_tenancy_power_watts",
              "GPU power of a tenancy's containers in the last pass (busy by SM share, idle by "
              "allocation).",
              [](const TenancyGauges& g) { return g.power_watts; }}}) {
    if (tenancy_now.empty()) break;
    out += std::string("# HELP ") + gauge.name + " " + gauge.help + "\n# TYPE " + gauge.name +
           " gauge\n";
    for (const auto& [key, g] : tenancy_now) {
      std::snprintf(line, sizeof line, "%s{%s} %.15g\n", gauge.name, SeriesLabels(key).c_str(),
                    gauge.value(g));
      out += line;
    }
  }
}

// The tenancy series' measured counters, in the exposition format.
void RenderTenancyCounters(const std::map<TenancySeriesKey, fleet::MeasuredUsage>& counters,
                           std::string& out) {
  char line[512];
  struct Counter {
    const char* name;
    const char* help;
    double fleet::MeasuredUsage::*field;
  };
  for (const Counter& counter :
       {Counter{"tessera_tenancy_sm_seconds_total",
                "Measured SM-seconds of a tenancy's containers (one GPU's SMs busy for a second: "
                "1).",
                &fleet::MeasuredUsage::sm_seconds},
        Counter{"tessera_tenancy_memory_gib_seconds_total",
                "Measured GPU memory of a tenancy's containers, GiB-seconds.",
                &fleet::MeasuredUsage::memory_gib_seconds},
        Counter{"tessera_tenancy_energy_joules_total",
                "GPU energy of a tenancy's containers: busy part by SM share, idle by allocation.",
                &fleet::MeasuredUsage::energy_joules}}) {
    out += std::string("# HELP ") + counter.name + " " + counter.help + "\n# TYPE " + counter.name +
           " counter\n";
    for (const auto& [key, usage] : counters) {
      std::snprintf(line, sizeof line, "%s{%s} %.3f\n", counter.name, SeriesLabels(key).c_str(),
                    usage.*(counter.field));
      out += line;
    }
  }
}

}  // namespace

void Measurement::Seed(const std::vector<fleet::TelemetryCursor>& cursors) {
  for (const auto& cursor : cursors)
    cursors_[cursor.gpu] = {cursor.sample_us, cursor.energy_mj, cursor.sampled_ms};
}

void Measurement::Open() {
  const TelemetryOptions& options = model_.options.telemetry;
  if (options.nvml_library.empty() || options.gpus.empty()) {
    spdlog::info("telemetry: off ({})", options.nvml_library.empty()
                                            ? "no NVML library"
                                            : "no NVIDIA GPU on the nvidia driver");
    return;
  }
  // Where the flags were not checked at start (an older caller), a bad proc directory turns
  // telemetry off rather than reading PIDs' files from wherever it points.
  if (auto checked = telemetry::CheckProcDir(options.proc_dir); !checked) {
    spdlog::warn("telemetry: off: {}", checked.error().message);
    return;
  }
  if (!OpenCollector()) return;
  node_metrics_ = std::make_unique<telemetry::NodeMetrics>(telemetry::NodeMetricsOptions{
      options.hostname, options.max_series, static_cast<int64_t>(options.interval.count())});
  spdlog::info("telemetry: {} GPUs every {} ms through {}", options.gpus.size(),
               options.interval.count(), options.nvml_library);
}

bool Measurement::OpenCollector() {
  const TelemetryOptions& options = model_.options.telemetry;
  telemetry::NvmlSourceOptions source;
  source.library = options.nvml_library;
  source.gpus = options.gpus;
  auto opened = telemetry::OpenNvmlSource(source);
  if (!opened) {
    spdlog::warn("telemetry: off: {}", opened.error().message);
    return false;
  }
  telemetry::CollectorOptions collector;
  collector.proc_dir = options.proc_dir;
  // Only memory of processes nobody can date (those that are gone) is bounded by this; a live
  // process is charged for the time it held its memory, a restart's downtime included.
  collector.integration.max_gap = 2 * options.interval;
  collector_ = std::make_unique<telemetry::Collector>(std::move(*opened), collector);
  return true;
}

void Measurement::Suspend() {
  std::scoped_lock lock(pass_mu_, sample_mu_);
  if (suspended_++ > 0) return;
  const bool was_open = collector_ != nullptr;
  collector_.reset();
  sample_nvml_.reset();
  reopen_ = was_open;
}

void Measurement::Resume() {
  std::scoped_lock lock(pass_mu_, sample_mu_);
  if (suspended_ == 0 || --suspended_ > 0) return;
  if (reopen_ && !OpenCollector()) spdlog::warn("telemetry: NVML not opened again after a reset");
  reopen_ = false;
}

void Measurement::Start() {
  if (!collector_ || thread_.joinable()) return;
  {
    std::lock_guard lock(wake_mu_);
    stopping_ = false;
  }
  thread_ = std::thread([this] { Loop(); });
}

void Measurement::Stop() {
  {
    std::lock_guard lock(wake_mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Measurement::Loop() {
  const auto interval = model_.options.telemetry.interval;
  for (;;) {
    {
      std::unique_lock lock(wake_mu_);
      if (wake_.wait_for(lock, interval, [this] { return stopping_; })) return;
    }
    Pass();
  }
}

telemetry::Directory Measurement::DirectoryLocked() {
  // The holders are the containers that hold this host's GPUs now: the GPUs say who (a walk
  // over the GPUs, not over every container).
  std::map<std::string, telemetry::Holder> holders;
  auto holder_of = [&](const std::string& id) -> telemetry::Holder* {
    auto it = model_.containers.find(id);
    if (it == model_.containers.end() || it->second.state != fleet::ContainerState::kRunning)
      return nullptr;
    const auto& container = it->second;
    auto [entry, inserted] = holders.try_emplace(id);
    if (inserted) {
      telemetry::Holder& h = entry->second;
      h.key = id;
      h.tenancy = container.spec.tenancy;
      h.tenancy_uid = container.tenancy_uid;
      h.mode = ModeOf(container);
      h.namespace_ = container.spec.tenancy;
      h.container = id;
      h.since_ms = container.started_ms;
      if (auto known = runtime_ids_.find(id); known != runtime_ids_.end())
        h.runtime_id = known->second;
    }
    return &entry->second;
  };
  for (const auto& gpu : model_.gpus) {
    if (!gpu.node.empty()) continue;  // another node's: its agent measures it
    // Shares: each holder, with its fraction (the lease names only one of them).
    for (const auto& share : gpu.shares)
      if (auto* h = holder_of(share.container_id))
        h->gpus[gpu.pci_address] = model_.containers.at(share.container_id).share_gpus;
    if (gpu.mig_enabled) {
      for (const auto& slice : gpu.mig_slices) {
        // A shared slice's shares are counted above, each by its own fraction.
        if (slice.container_id.empty() || slice.shared) continue;
        if (auto* h = holder_of(slice.container_id); h && gpu.compute_slices > 0)
          h->gpus[gpu.pci_address] +=
              static_cast<double>(slice.compute_slices) / gpu.compute_slices;
      }
    } else if (gpu.shares.empty() && !gpu.container_id.empty() &&
               (gpu.state == fleet::LeaseState::kActive ||
                gpu.state == fleet::LeaseState::kReserved)) {
      if (auto* h = holder_of(gpu.container_id)) h->gpus[gpu.pci_address] = 1.0;
    }
  }
  telemetry::Directory directory;
  for (auto& [id, holder] : holders)
    directory.holders.push_back(std::move(holder));
  return directory;
}

void Measurement::Pass() {
  std::lock_guard lock(pass_mu_);
  if (suspended_ > 0) return;  // a reset runs: no NVML client may hold the GPU
  PassUnsuspended();
}

void Measurement::PassUnsuspended() {
  if (!collector_) return;
  telemetry::Directory directory;
  std::map<std::string, std::string> model_of_gpu;  // PCI address -> model
  {
    std::lock_guard lock(model_.mu);
    directory = DirectoryLocked();
    for (const auto& gpu : model_.gpus)
      if (gpu.node.empty()) model_of_gpu[gpu.pci_address] = gpu.model;
  }
  ResolveRuntimeIds(directory);

  const int64_t now_ms = fleet::NowMs();
  std::map<std::string, int64_t> previous_ms;  // each GPU's previous read
  for (const auto& [pci, cursor] : cursors_)
    previous_ms[pci] = cursor.sampled_ms;
  telemetry::PassResult pass = collector_->Collect(directory, cursors_, now_ms);
  const auto& cost = collector_->last_cost();
  spdlog::debug("telemetry: pass {:.2f} ms CPU ({:.2f} ms in NVML), {} cgroups read",
                cost.cpu_seconds * 1e3, cost.nvml_seconds * 1e3, cost.cgroup_reads);
  LogPassProblems(pass);

  auto gauges = GaugesOf(pass, now_ms);
  std::map<TenancySeriesKey, TenancyGauges> tenancy_now;
  {
    std::lock_guard lock(model_.mu);
    tenancy_now = RecordPassLocked(pass, directory, model_of_gpu, previous_ms, *gauges);
  }
  std::lock_guard lock(mu_);
  node_metrics_->Update(pass, directory);
  last_pass_ = std::move(pass);
  last_directory_ = std::move(directory);
  gauges_ = std::move(gauges);
  tenancy_now_ = std::move(tenancy_now);
}

void Measurement::ResolveRuntimeIds(telemetry::Directory& directory) {
  // podman's ID of each new holder (a small file the backend wrote), outside the model's lock.
  std::set<std::string> current;
  for (auto& holder : directory.holders) {
    current.insert(holder.key);
    if (!holder.runtime_id.empty()) continue;
    auto id = backend_.RuntimeId(holder.key);
    if (!id) continue;  // asked again next pass
    runtime_ids_[holder.key] = *id;
    holder.runtime_id = *id;
  }
  std::erase_if(runtime_ids_, [&](const auto& entry) { return !current.count(entry.first); });
}

std::map<TenancySeriesKey, TenancyGauges> Measurement::RecordPassLocked(
    const telemetry::PassResult& pass, const telemetry::Directory& directory,
    std::map<std::string, std::string>& model_of_gpu,
    const std::map<std::string, int64_t>& previous_ms, Gauges& gauges) {
  const MeasuredSpan span{previous_ms, cursors_,
                          std::chrono::duration<double>(model_.options.telemetry.interval).count()};
  // The measured use goes into the containers' records, and the GPUs' cursors with it, in one
  // commit: after a kill -9 the store holds both from the same pass.
  std::map<TenancySeriesKey, TenancyGauges> tenancy_now;
  std::vector<fleet::Mutation> mutations;
  for (const auto& reading : pass.holders) {
    const auto& holder = directory.holders[reading.holder];
    auto it = model_.containers.find(holder.key);
    // A container that ended during the pass keeps what it had (one interval at most lost).
    if (it == model_.containers.end() || it->second.state != fleet::ContainerState::kRunning)
      continue;
    auto& container = it->second;
    const std::string gpu_model =
        holder.gpus.empty() ? "" : model_of_gpu[holder.gpus.begin()->first];
    AddHolderGauges(reading, span, gauges.tenancies[holder.tenancy],
                    tenancy_now[{holder.tenancy, gpu_model, holder.mode}]);
    // Measured from its first pass on (zeros included: it was measured).
    if (container.measured && reading.delta.empty()) continue;
    if (!container.measured) container.measured = fleet::MeasuredUsage{};
    *container.measured += reading.delta;
    model_.meter.Measured(container.tenancy_uid, container.id, *container.measured);
    mutations.push_back(container);
  }
  for (const auto& gpu : pass.gpus) {
    if (gpu.reading.lost) continue;
    fleet::TelemetryCursor cursor{gpu.reading.identity.pci_address, gpu.cursor.sample_us,
                                  gpu.cursor.energy_mj, gpu.cursor.sampled_ms};
    model_.telemetry_cursors[cursor.gpu] = cursor;
    mutations.push_back(std::move(cursor));
  }
  model_.Commit(std::move(mutations), [](Status status) {
    if (!status) spdlog::error("telemetry: store: {}", status.error().message);
  });
  return tenancy_now;
}

std::shared_ptr<const Gauges> Measurement::gauges() const {
  std::lock_guard lock(mu_);
  return gauges_;
}

void Measurement::RenderMetrics(std::string& out) const {
  // Counters: the ended runs' usage records and the running containers' records, per tenancy
  // (its current incarnation: a name created again starts from nothing, a deleted one's series
  // go), GPU model and mode; and each container's own, for the node's series (one that ended
  // keeps its final figures while its series linger).
  std::vector<std::string> shown;
  {
    std::lock_guard lock(mu_);
    if (node_metrics_) shown = node_metrics_->keys();
  }
  std::map<TenancySeriesKey, fleet::MeasuredUsage> counters;
  std::map<std::string, telemetry::HolderTotals> totals;
  {
    std::lock_guard lock(model_.mu);
    counters = TenancyCountersLocked();
    for (const auto& key : shown) {
      auto it = model_.containers.find(key);
      if (it == model_.containers.end()) continue;
      if (it->second.measured) totals[key].total = *it->second.measured;
    }
  }
  std::lock_guard lock(mu_);
  if (node_metrics_) out += node_metrics_->Render(totals, fleet::NowMs());
  RenderTenancyGauges(tenancy_now_, out);
  if (counters.empty()) return;
  RenderTenancyCounters(counters, out);
}

std::map<TenancySeriesKey, fleet::MeasuredUsage> Measurement::TenancyCountersLocked() const {
  std::map<std::string, std::string> current;  // uid -> name
  for (const auto& [name, tenancy] : model_.tenancies)
    current[tenancy.uid] = name;
  auto counters = model_.meter.EndedMeasured(current);
  std::set<std::string> running;
  for (const auto& gpu : model_.gpus) {
    // Every holder: the lease's, each MIG slice's and each share's.
    std::vector<const std::string*> holders = {&gpu.container_id};
    for (const auto& slice : gpu.mig_slices)
      holders.push_back(&slice.container_id);
    for (const auto& share : gpu.shares)
      holders.push_back(&share.container_id);
    for (const auto* id : holders) {
      if (id->empty() || !running.insert(*id).second) continue;
      auto it = model_.containers.find(*id);
      if (it == model_.containers.end() || it->second.state != fleet::ContainerState::kRunning)
        continue;
      const auto& c = it->second;
      if (c.measured && current.count(c.tenancy_uid))
        counters[{c.spec.tenancy, gpu.model, ModeOf(c)}] += *c.measured;
    }
  }
  return counters;
}

std::string Measurement::PassJson(const Caller& caller) const {
  std::lock_guard lock(mu_);
  if (caller.admin) return telemetry::PassToJson(last_pass_, last_directory_);
  // A tenant sees the GPUs its containers held in that pass, and only its own containers on
  // them; nothing of the processes nobody holds.
  telemetry::PassResult mine = last_pass_;
  std::erase_if(mine.holders, [&](const telemetry::HolderReading& reading) {
    return caller.tenancy_uid.empty() ||
           last_directory_.holders[reading.holder].tenancy_uid != caller.tenancy_uid;
  });
  std::set<std::string> held;
  for (const auto& holder : last_directory_.holders)
    if (!caller.tenancy_uid.empty() && holder.tenancy_uid == caller.tenancy_uid)
      for (const auto& [pci_address, share] : holder.gpus)
        held.insert(pci_address);
  std::erase_if(mine.gpus, [&](const telemetry::GpuSnapshot& gpu) {
    return !held.count(gpu.reading.identity.pci_address);
  });
  for (auto& gpu : mine.gpus) {
    gpu.unattributed_processes = 0;
    gpu.unattributed_memory = 0;
    gpu.unattributed_sm_percent = 0;
    gpu.unattributed = {};
  }
  return telemetry::PassToJson(mine, last_directory_);
}

}  // namespace tessera::serve

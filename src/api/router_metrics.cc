// GET /metrics: the service's counters, request latency and, in full, the per-tenancy series.
#include <cstdio>

#include "api/router.h"

namespace tessera::api {
namespace {

constexpr std::array<const char*, 5> kMethodNames = {"GET", "POST", "PUT", "DELETE", "other"};

// GPUs and containers by state, the store's and the scheduler's counters.
void RenderServiceCounters(std::string& out, const serve::Counts& counts) {
  out += "# HELP tessera_gpus GPUs on this host by lease state.\n# TYPE tessera_gpus gauge\n";
  for (int i = 0; i < fleet::kLeaseStateCount; ++i) {
    out += std::string("tessera_gpus{state=\"") +
           fleet::LeaseStateName(static_cast<fleet::LeaseState>(i)) + "\"} " +
           std::to_string(counts.gpus[i]) + "\n";
  }
  out +=
      "# HELP tessera_containers Containers in the store by state.\n"
      "# TYPE tessera_containers gauge\n";
  for (int i = 0; i < 4; ++i) {
    out += std::string("tessera_containers{state=\"") +
           fleet::ContainerStateName(static_cast<fleet::ContainerState>(i)) + "\"} " +
           std::to_string(counts.containers[i]) + "\n";
  }
  out +=
      "# HELP tessera_store_commits_total Store transactions (commit groups).\n"
      "# TYPE tessera_store_commits_total counter\ntessera_store_commits_total " +
      std::to_string(counts.store.groups) + "\n";
  out +=
      "# HELP tessera_store_records_written_total Records written by the store.\n"
      "# TYPE tessera_store_records_written_total counter\n"
      "tessera_store_records_written_total " +
      std::to_string(counts.store.mutations) + "\n";
  out +=
      "# HELP tessera_store_checkpoints_total WAL checkpoints run off the commit path.\n"
      "# TYPE tessera_store_checkpoints_total counter\n"
      "tessera_store_checkpoints_total " +
      std::to_string(counts.store.checkpoints) + "\n";
  out +=
      "# HELP tessera_store_write_failing 1 while the store cannot write (disk full, I/O error, "
      "damage): changes are refused with 503 until a write succeeds.\n"
      "# TYPE tessera_store_write_failing gauge\ntessera_store_write_failing " +
      std::string(counts.store_write_failure ? "1" : "0") + "\n";
  out +=
      "# HELP tessera_scheduling_passes_total Passes of the scheduling policy (one per change "
      "that could start or reserve something, however many came at once).\n"
      "# TYPE tessera_scheduling_passes_total counter\ntessera_scheduling_passes_total " +
      std::to_string(counts.scheduling_passes) + "\n";
  out +=
      "# HELP tessera_queue_reports_total Queue positions and reasons worked out for readers.\n"
      "# TYPE tessera_queue_reports_total counter\ntessera_queue_reports_total " +
      std::to_string(counts.queue_reports) + "\n";
}

// One series per tenancy incarnation that exists (uid): a name created again starts from
// nothing, and a deleted one's series go. Names are DNS labels and uids hex: nothing needs
// escaping in a label value.
void RenderTenancySeries(std::string& out, const serve::Counts& counts) {
  out +=
      "# HELP tessera_tenancy_gpu_seconds_total GPU-seconds metered per tenancy (ended and "
      "running containers).\n# TYPE tessera_tenancy_gpu_seconds_total counter\n";
  char line[384];
  for (const auto& tenancy : counts.tenancies) {
    std::snprintf(line, sizeof(line),
                  "tessera_tenancy_gpu_seconds_total{tenancy=\"%s\",uid=\"%s\"} %.3f\n",
                  tenancy.name.c_str(), tenancy.uid.c_str(), tenancy.gpu_seconds);
    out += line;
  }
  out +=
      "# HELP tessera_queue_wait_seconds How long GPU containers waited in the queue, by "
      "tenancy.\n# TYPE tessera_queue_wait_seconds histogram\n";
  for (const auto& tenancy : counts.tenancies) {
    if (!tenancy.queue_waits) continue;
    const auto& waits = *tenancy.queue_waits;
    const std::string labels = "tenancy=\"" + tenancy.name + "\",uid=\"" + tenancy.uid + "\"";
    for (size_t i = 0; i < waits.cumulative.size(); ++i) {
      if (i < waits.bounds.size()) {
        std::snprintf(line, sizeof(line), "tessera_queue_wait_seconds_bucket{%s,le=\"%g\"} %llu\n",
                      labels.c_str(), waits.bounds[i],
                      static_cast<unsigned long long>(waits.cumulative[i]));
      } else {
        std::snprintf(line, sizeof(line),
                      "tessera_queue_wait_seconds_bucket{%s,le=\"+Inf\"} %llu\n", labels.c_str(),
                      static_cast<unsigned long long>(waits.cumulative[i]));
      }
      out += line;
    }
    std::snprintf(line, sizeof(line),
                  "tessera_queue_wait_seconds_sum{%s} %.3f\n"
                  "tessera_queue_wait_seconds_count{%s} %llu\n",
                  labels.c_str(), waits.sum, labels.c_str(),
                  static_cast<unsigned long long>(waits.count));
    out += line;
  }
}

}  // namespace

void LatencyHistogram::Observe(double seconds) {
  size_t i = 0;
  while (i < kBounds.size() && seconds > kBounds[i])
    ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_us_.fetch_add(static_cast<uint64_t>(seconds * 1e6), std::memory_order_relaxed);
}

void LatencyHistogram::Render(std::string& out, const std::string& name,
                              const std::string& labels) const {
  uint64_t cumulative = 0;
  char line[256];
  for (size_t i = 0; i <= kBounds.size(); ++i) {
    cumulative += buckets_[i].load(std::memory_order_relaxed);
    if (i < kBounds.size()) {
      std::snprintf(line, sizeof(line), "%s_bucket{%s,le=\"%g\"} %llu\n", name.c_str(),
                    labels.c_str(), kBounds[i], static_cast<unsigned long long>(cumulative));
    } else {
      std::snprintf(line, sizeof(line), "%s_bucket{%s,le=\"+Inf\"} %llu\n", name.c_str(),
                    labels.c_str(), static_cast<unsigned long long>(cumulative));
    }
    out += line;
  }
  std::snprintf(line, sizeof(line), "%s_sum{%s} %.6f\n%s_count{%s} %llu\n", name.c_str(),
                labels.c_str(), sum_us_.load(std::memory_order_relaxed) / 1e6, name.c_str(),
                labels.c_str(), static_cast<unsigned long long>(count_.load()));
  out += line;
}

std::string Router::Metrics(bool full) const {
  auto counts = service_->counts();
  std::string out;
  RenderServiceCounters(out, counts);
  RenderLatency(out);
  // The aggregate ends here: what follows names tenancies, containers and GPUs.
  if (!full) return out;
  RenderTenancySeries(out, counts);
  out += service_->ExtraMetrics();
  service_->fault_metrics().Render(out);
  // This host's GPUs and containers (the node endpoint of embedded mode) and per tenancy.
  service_->RenderTelemetryMetrics(out);
  return out;
}

void Router::RenderLatency(std::string& out) const {
  out +=
      "# HELP tessera_http_request_duration_seconds API request latency by method.\n"
      "# TYPE tessera_http_request_duration_seconds histogram\n";
  for (size_t i = 0; i < latency_.size(); ++i) {
    latency_[i].Render(out, "tessera_http_request_duration_seconds",
                       std::string("method=\"") + kMethodNames[i] + "\"");
  }
}

}  // namespace tessera::api

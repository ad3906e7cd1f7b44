// GPU fault and recovery series (see fault_metrics.h).
#include "serve/fault_metrics.h"

#include <cstdio>
#include <string_view>

namespace tessera::serve {
namespace fault_metrics_detail {

// Label values are bounded here, whatever a caller hands in: a GPU ID is a PCI address (with
// "@<node>" in fleet mode), an action one of a few words.
constexpr size_t kMaxGpuLabel = 160;
constexpr size_t kMaxActionLabel = 32;

// A label value in the text format: backslash, double quote and newline escaped.
void AppendLabelValue(std::string& out, std::string_view value, size_t max) {
  for (char c : value.substr(0, max)) {
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

std::string Seconds(double value) {
  char text[48];
  std::snprintf(text, sizeof text, "%.3f", value);
  return text;
}

}  // namespace fault_metrics_detail

using fault_metrics_detail::AppendLabelValue;

bool FaultMetrics::KeepGpuLocked(const std::string& gpu) {
  if (gpus_.count(gpu)) return true;
  if (gpus_.size() >= max_gpus_) return false;
  gpus_.insert(gpu);
  return true;
}

void FaultMetrics::Fault(const std::string& gpu, uint64_t xid, const std::string& action) {
  std::lock_guard lock(mu_);
  const std::string label_gpu = gpu.substr(0, fault_metrics_detail::kMaxGpuLabel);
  const std::string label_action = action.substr(0, fault_metrics_detail::kMaxActionLabel);
  if (!KeepGpuLocked(label_gpu)) {
    ++dropped_;
    return;
  }
  auto& series = faults_[label_gpu];
  auto key = std::make_pair(xid, label_action);
  auto it = series.find(key);
  if (it == series.end()) {
    if (series.size() >= max_series_per_gpu_) {
      ++dropped_;
      return;
    }
    it = series.emplace(std::move(key), 0).first;
  }
  ++it->second;
}

void FaultMetrics::Recovered(const std::string& gpu, double seconds) {
  std::lock_guard lock(mu_);
  if (!(seconds >= 0)) seconds = 0;  // a clock that stepped back (or NaN) counts as at once
  size_t i = 0;
  while (i < kRecoveryBounds.size() && seconds > kRecoveryBounds[i])
    ++i;
  ++recovery_buckets_[i];
  ++recovery_count_;
  recovery_sum_ += seconds;
  const std::string label_gpu = gpu.substr(0, fault_metrics_detail::kMaxGpuLabel);
  if (KeepGpuLocked(label_gpu)) {
    ++recoveries_[label_gpu];
  } else {
    ++dropped_;
  }
}

void FaultMetrics::Render(std::string& out) const {
  std::lock_guard lock(mu_);
  out +=
      "# HELP tessera_gpu_faults_total GPU faults by GPU, Xid (0: a signal that is no Xid) and "
      "the action taken.\n# TYPE tessera_gpu_faults_total counter\n";
  for (const auto& [gpu, series] : faults_) {
    for (const auto& [key, count] : series) {
      out += "tessera_gpu_faults_total{gpu=\"";
      AppendLabelValue(out, gpu, fault_metrics_detail::kMaxGpuLabel);
      out += "\",xid=\"" + std::to_string(key.first) + "\",action=\"";
      AppendLabelValue(out, key.second, fault_metrics_detail::kMaxActionLabel);
      out += "\"} " + std::to_string(count) + "\n";
    }
  }
  out +=
      "# HELP tessera_gpu_recoveries_total GPUs returned to service after a fault (reset and "
      "verified).\n# TYPE tessera_gpu_recoveries_total counter\n";
  for (const auto& [gpu, count] : recoveries_) {
    out += "tessera_gpu_recoveries_total{gpu=\"";
    AppendLabelValue(out, gpu, fault_metrics_detail::kMaxGpuLabel);
    out += "\"} " + std::to_string(count) + "\n";
  }
  out +=
      "# HELP tessera_gpu_recovery_seconds Time from the fault that took a GPU out to its "
      "return to service.\n# TYPE tessera_gpu_recovery_seconds histogram\n";
  uint64_t cumulative = 0;
  char line[96];
  for (size_t i = 0; i <= kRecoveryBounds.size(); ++i) {
    cumulative += recovery_buckets_[i];
    if (i < kRecoveryBounds.size()) {
      std::snprintf(line, sizeof line, "tessera_gpu_recovery_seconds_bucket{le=\"%g\"} %llu\n",
                    kRecoveryBounds[i], static_cast<unsigned long long>(cumulative));
    } else {
      std::snprintf(line, sizeof line, "tessera_gpu_recovery_seconds_bucket{le=\"+Inf\"} %llu\n",
                    static_cast<unsigned long long>(cumulative));
    }
    out += line;
  }
  out += "tessera_gpu_recovery_seconds_sum " + fault_metrics_detail::Seconds(recovery_sum_) +
         "\ntessera_gpu_recovery_seconds_count " + std::to_string(recovery_count_) + "\n";
  out +=
      "# HELP tessera_gpu_fault_series_dropped_total Faults and recoveries not kept in a series "
      "(past the bound on GPUs or on series per GPU).\n"
      "# TYPE tessera_gpu_fault_series_dropped_total counter\n"
      "tessera_gpu_fault_series_dropped_total " +
      std::to_string(dropped_) + "\n";
}

}  // namespace tessera::serve

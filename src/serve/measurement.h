// What this host's GPUs and the containers on them really use (embedded mode): the telemetry
// collector every --telemetry-interval over the host's GPUs, its processes attributed through
// their cgroups to the running containers (podman's container IDs from the backend), the
// measured use added to each container's record in the same commit as the GPUs' cursors (so a
// service killed at any point restarts from a consistent pair: nothing counted twice, at most one
// interval lost), the node's series (per GPU, per container), the per-tenancy series (in
// Kubernetes mode from the usage records alone) and the dashboard's gauges.
//
// Threads: one collection thread; readers (the API) take the latest results under mu_. Lock
// order: the model's mu before mu_.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "backends/backend.h"
#include "serve/dashboard.h"
#include "serve/metering.h"
#include "serve/model.h"
#include "serve/types.h"
#include "sharing/sharing.h"
#include "telemetry/telemetry.h"

namespace tessera::serve {

class Measurement {
 public:
  Measurement(Model& model, backends::ContainerBackend& backend)
      : model_(model), backend_(backend) {}
  ~Measurement() { Stop(); }

  // The cursors the store holds (at load, before Open).
  void Seed(const std::vector<fleet::TelemetryCursor>& cursors);
  // Opens NVML for the host's GPUs (options.telemetry). Off (and the reason logged) when the
  // options name no library or it cannot be opened: serve runs on hosts without the driver.
  void Open();
  bool enabled() const { return collector_ != nullptr; }
  void Start();
  void Stop();

  // One pass now (tests and benchmarks; the thread does the same every interval).
  void Pass();
  // A GPU reset is about to run: it is refused while any NVML client holds the GPU. Waits for
  // the pass (and the watchdog's reading) under way, then closes telemetry's NVML; passes are
  // skipped until Resume opens it again (the cursors stay: nothing is counted twice).
  void Suspend();
  void Resume();

  std::shared_ptr<const Gauges> gauges() const;
  // The GPU processes of the containers that hold shares, read from NVML now (not from the last
  // pass), each with its memory: what the shares' watchdog sums at each of its samples. Any
  // thread; one reading at a time (share_sample.cc).
  Result<std::vector<sharing::ProcessUse>> SampleShareProcesses();
  // The node's series (per GPU, per MIG instance, per container) and the per-tenancy series.
  void RenderMetrics(std::string& out) const;
  // GET /v1/telemetry: the last pass (a tenant sees its own containers only).
  std::string PassJson(const Caller& caller) const;

 private:
  void Loop();
  // The NVML source and the collector over it (Open and Resume).
  bool OpenCollector();
  void PassUnsuspended();
  telemetry::Directory DirectoryLocked();  // model_.mu held
  // Pass's steps. podman's ID of each new holder (outside the model's lock).
  void ResolveRuntimeIds(telemetry::Directory& directory);
  // model_.mu held: the pass's measured use into the containers' records and the GPUs' cursors
  // (one commit), the tenancies' gauges into `gauges` (power over the time since each GPU's
  // `previous_ms` read); returns the tenancy series' gauges.
  std::map<TenancySeriesKey, TenancyGauges> RecordPassLocked(
      const telemetry::PassResult& pass, const telemetry::Directory& directory,
      std::map<std::string, std::string>& model_of_gpu,
      const std::map<std::string, int64_t>& previous_ms, Gauges& gauges);
  // model_.mu held: measured usage per tenancy series, ended runs' and running containers'.
  std::map<TenancySeriesKey, fleet::MeasuredUsage> TenancyCountersLocked() const;

  Model& model_;
  backends::ContainerBackend& backend_;
  std::unique_ptr<telemetry::Collector> collector_;  // the collection thread only, after Open
  telemetry::Cursors cursors_;                       // the collection thread only
  std::unordered_map<std::string, std::string> runtime_ids_;  // container ID -> podman's

  std::thread thread_;
  std::mutex wake_mu_;
  std::condition_variable wake_;
  bool stopping_ = false;  // wake_mu_

  // Held by each pass, and by Suspend/Resume: guards suspended_ and collector_'s lifetime.
  std::mutex pass_mu_;
  int suspended_ = 0;    // Suspend calls not yet resumed (pass_mu_ and sample_mu_ both held)
  bool reopen_ = false;  // Resume opens the collector again

  std::mutex sample_mu_;  // the watchdog's reading: guards the two below
  std::unique_ptr<nvml::Library> sample_nvml_;
  std::unordered_map<std::string, std::string> sample_runtime_ids_;  // container ID -> podman's

  mutable std::mutex mu_;  // guards the results below
  std::unique_ptr<telemetry::NodeMetrics> node_metrics_;
  telemetry::PassResult last_pass_;
  telemetry::Directory last_directory_;
  std::shared_ptr<const Gauges> gauges_;
  // The last pass's SM use and memory per tenancy series (the gauges of /metrics).
  std::map<TenancySeriesKey, TenancyGauges> tenancy_now_;
};

}  // namespace tessera::serve

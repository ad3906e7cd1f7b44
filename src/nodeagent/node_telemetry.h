// The node agent's GPU telemetry (tessera-lease-sync --telemetry-interval-ms): the collector
// over this node's GPUs, attributed to the Pods of this node (a Pod list+watch by
// spec.nodeName) and through their GpuLeases to tenancies; per-lease measured use kept durable
// in the GpuLease's status.measured (totals and the cursors of its GPUs in one patch, so a
// restarted agent neither loses nor counts twice); and /metrics with dcgm-exporter's names and
// labels (pod, namespace, container) plus /v1/telemetry for `tessera top`.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kubernetes/client.h"
#include "telemetry/telemetry.h"

namespace tessera::k8s {

// What the agent keeps of a Pod on its node.
struct NodePod {
  std::string uid;
  std::string ns;
  std::string name;
  std::string container;  // its first container's name
  std::string phase;
};
// From a Pod object (bounded: names longer than 253 characters are refused).
std::optional<NodePod> NodePodOf(const Json& pod);

// Holders for the collector: every Pod of the node (so GPU processes of any Pod get its labels),
// with the tenancy and GPUs of the reserved or active GpuLease whose podRef names it; a leased
// holder's key is the lease's name, another Pod's "pod:<namespace>/<name>" (never metered).
telemetry::Directory NodeDirectory(const std::map<std::string, Json>& leases,
                                   const std::map<std::string, NodePod>& pods);

// status.measured of a GpuLease: the totals and the cursors of its GPUs; zeros when absent or
// malformed.
struct LeaseMeasured {
  telemetry::Usage total;
  telemetry::Cursors cursors;
  // The last pass's figures of its GPUs (the control plane's dashboard shows them), by PCI address.
  struct GpuGauges {
    std::optional<double> util_percent;
    uint64_t memory_used = 0, memory_total = 0;
    double power_watts = 0;
    friend bool operator==(const GpuGauges&, const GpuGauges&) = default;
  };
  std::map<std::string, GpuGauges> gauges;
};
LeaseMeasured MeasuredOfLease(const Json& lease);
// The merge patch of status.measured.
Json MeasuredPatch(const LeaseMeasured& measured, int64_t now_ms);

struct NodeTelemetryOptions {
  std::string node;
  std::string hostname;  // the Hostname label (default: the node's name)
  std::string nvml_library = "libnvidia-ml.so.1";
  std::string proc_dir = "/proc";
  std::chrono::milliseconds interval{10000};
  size_t max_series = 10000;
  std::string listen;  // HOST:PORT for /metrics and /v1/telemetry; empty: no endpoint
  // The endpoint's token file, connection cap and deadlines (its host and port come from
  // `listen`); /healthz is open, /metrics and /v1/telemetry need the token.
  telemetry::EndpointOptions endpoint;
  std::vector<telemetry::GpuIdentity> gpus;
  // More series for /metrics from parts of the agent telemetry does not own (the fabric
  // manager's activator); called on every scrape.
  std::function<std::string()> extra_metrics;
};

class NodeTelemetry {
 public:
  // This node's leases (by name), or nullopt until their watch has listed once.
  using LeaseSnapshot = std::function<std::optional<std::map<std::string, Json>>()>;

  // Opens NVML and starts the Pod watch, the collection loop and the endpoint.
  static Result<std::unique_ptr<NodeTelemetry>> Start(const ClientConfig& config,
                                                      NodeTelemetryOptions options,
                                                      LeaseSnapshot leases);
  ~NodeTelemetry();
  NodeTelemetry(const NodeTelemetry&) = delete;
  NodeTelemetry& operator=(const NodeTelemetry&) = delete;

  uint16_t port() const;  // the endpoint's bound port; 0 without one

  // Closes NVML (no pass runs) so that a GPU reset is not refused as "in use", until Resume()
  // opens it again; the measurements carry on from the leases' cursors.
  void Suspend();
  void Resume();

  struct Impl;

 private:
  explicit NodeTelemetry(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::k8s

// Turning a placed container into a running one. The service decides what runs where and with
// which GPUs; a backend only runs it: podman with CDI devices on this host (backends/local), or
// Kubernetes objects through the API server (backends/kubernetes).
//
// Containers are named by the fleet's container ID. A backend labels what it creates with that
// ID and its instance label so List() finds exactly its own containers after a restart.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "fleet/fleet.h"
#include "tenancy/tenancy.h"

namespace tessera::backends {

struct StartRequest {
  std::string id;       // the fleet's container ID
  std::string tenancy;  // the tenancy it runs for (a namespace in Kubernetes)
  std::string image;
  std::vector<std::string> command;  // empty: the image's default
  std::map<std::string, std::string> env;
  fleet::Isolation isolation = fleet::Isolation::kRunc;
  // Fully qualified CDI device names, e.g. "nvidia.com/gpu=GPU-8f6b…": the GPUs placed for it.
  std::vector<std::string> cdi_devices;
  std::vector<std::string> gpu_pci_addresses;  // the same GPUs by PCI address
  std::string node;  // the node they are on (fleet placement); empty: this host / any node
  std::map<std::string, std::string> labels;  // extra labels/annotations to attach
  // Its tenancy's network, or none; the NFS volumes it mounts, already checked against the
  // tenancy's storage entitlements.
  tenancy::NetworkMode network = tenancy::NetworkMode::kTenancy;
  std::vector<tenancy::ResolvedVolume> volumes;
  // Host directories bound into it (a share of a GPU: the MPS daemon's pipe directory and its
  // private shm as /dev/shm). Paths the service made, never ones a tenant named.
  struct Bind {
    std::string host_path;
    std::string container_path;
    bool read_only = false;
  };
  std::vector<Bind> binds;
  // Ports to publish: the embedded service fills in host_address and host_port (ports it holds
  // for this container alone); backends that choose their own (Kubernetes: a Service) leave
  // them empty and report them through Exposure(). With `ready`, the container's readiness probe.
  std::vector<fleet::PublishedPort> ports;
  std::optional<fleet::ReadinessProbe> ready;
};

// Where a running container's ports are reached and whether it is ready, as the backend knows it.
struct Exposure {
  std::vector<fleet::PublishedPort> ports;
  std::optional<bool> ready;  // unset: the backend does not probe (the service does)
};

// A part of a container's output for a follower: what follows byte `offset` of its log, as the
// backend numbers the log (podman: the bytes of its k8s-file log; others: the bytes of the text
// Logs() gives), so `end` asked for next time gives only what came after.
struct LogPart {
  std::string text;  // the output, stdout and stderr interleaved
  uint64_t end = 0;  // where the next part starts
  // Output between the offset asked for and `text` is gone: the log was emptied at its cap since
  // (the offset lies past its end), or it lies further back than one part reaches.
  bool cut = false;
};

// How a container ended.
struct ExitInfo {
  ExitInfo() = default;
  ExitInfo(std::optional<int> exit_code, bool failed, std::string reason)
      : exit_code(exit_code), failed(failed), reason(std::move(reason)) {}

  std::optional<int> exit_code;  // set when it ran and exited
  bool failed = false;           // could not be created/started, or vanished
  std::string reason;            // why it failed; empty otherwise
  // What its GPU processes were measured to use, where the backend learns it (Kubernetes: the
  // node agent's GpuLease status.measured); this host's own telemetry adds to the record itself.
  std::optional<fleet::MeasuredUsage> measured;
  // When it ended as the runtime recorded it (podman's State.FinishedAt, a Pod container's
  // finishedAt), Unix ms; 0 when the runtime does not say (the service's clock then). Billing
  // follows it: an exit while the service was down is not billed until the service learnt it.
  int64_t finished_ms = 0;
  // The runtime says it never started (created, then failed or removed): nothing is billed.
  bool never_started = false;
};

struct GpuCheckVerdict {
  bool passed = false;
  std::string reason;  // why it failed
};

enum class BackendState {
  kCreated,  // exists, not started yet
  kRunning,
  kExited,
  kUnknown,
};
inline const char* BackendStateName(BackendState state) {
  switch (state) {
    case BackendState::kCreated:
      return "created";
    case BackendState::kRunning:
      return "running";
    case BackendState::kExited:
      return "exited";
    default:
      return "unknown";
  }
}

struct BackendContainer {
  std::string id;  // the fleet's container ID
  BackendState state = BackendState::kUnknown;
  std::optional<int> exit_code;  // when exited
  // As the runtime recorded them, Unix ms; 0: unknown (or, for started_ms of an exited one,
  // never started: `never_started`).
  int64_t started_ms = 0;
  int64_t finished_ms = 0;
  bool never_started = false;
};

// What a node agent last measured of one GPU (Kubernetes: the GpuLease's status.measured.gauges).
struct GpuGaugeReading {
  std::optional<double> util_percent;  // unset for a GPU in MIG mode
  std::optional<uint64_t> memory_used, memory_total;
  std::optional<double> power_watts;
  int64_t time_ms = 0;  // when it was measured
};

// Called once per container when it has ended, from a thread the backend owns. Must not call
// back into the backend for the same container synchronously with blocking work.
using ExitCallback = std::function<void(const std::string& id, const ExitInfo& info)>;

class ContainerBackend {
 public:
  virtual ~ContainerBackend() = default;

  virtual std::string name() const = 0;

  // Whether this backend can run containers with `isolation` and `gpus` GPUs at all (runtime
  // installed, runtime class present, the runtime able to pass GPUs through). FailedPrecondition
  // with the reason otherwise; the API answers 409. Answers from what the backend learnt when it
  // was created: it runs on every submission.
  virtual Status CheckIsolation(fleet::Isolation isolation, int gpus) const = 0;

  // Whether a share of a GPU (MPS or time-slicing) can run with `isolation` here: runc yes; gVisor
  // only with an nvproxy that carries MPS; InvalidArgument (400) otherwise, naming why.
  virtual Status CheckShare(fleet::Isolation isolation) const {
    if (isolation == fleet::Isolation::kRunc) return Ok();
    return InvalidArgument(std::string("share: the ") + name() + " backend runs shares with " +
                           "isolation runc only, not " + fleet::IsolationName(isolation));
  }

  // Starts the container and returns once the start is under way; `on_exit` runs when it ends
  // (with failed=true when it could not be created). An error here means nothing was started.
  virtual Status Start(const StartRequest& request, ExitCallback on_exit) = 0;

  // Follows a container found by List() after a restart; `on_exit` as for Start.
  virtual Status Watch(const std::string& id, ExitCallback on_exit) = 0;

  // Starts a container found by List() in the created state (its start was cut short when the
  // service died) and follows it; `on_exit` as for Start. Backends whose containers cannot be
  // left created follow it as Watch does.
  virtual Status Resume(const std::string& id, ExitCallback on_exit) {
    return Watch(id, std::move(on_exit));
  }

  // Stops it (SIGTERM, then SIGKILL after `grace`). NotFound when it does not exist.
  virtual Status Stop(const std::string& id, std::chrono::seconds grace) = 0;

  // State and exit code. NotFound when it does not exist.
  virtual Result<BackendContainer> Inspect(const std::string& id) = 0;

  // Everything it printed (stdout and stderr interleaved, as the runtime recorded them).
  virtual Result<std::string> Logs(const std::string& id) = 0;
  // What it printed after byte `offset` of its log (LogPart). By default the bytes of Logs()'s
  // text; an offset past its end reads it from the start, as cut.
  virtual Result<LogPart> LogsFrom(const std::string& id, uint64_t offset) {
    auto text = Logs(id);
    if (!text) return text.error();
    LogPart part;
    part.cut = offset > text->size();
    part.text = part.cut ? std::move(*text) : text->substr(offset);
    part.end = part.cut ? part.text.size() : text->size();
    return part;
  }

  // Every container of this backend instance, for reconciliation after a restart.
  virtual Result<std::vector<BackendContainer>> List() = 0;

  // Deletes an ended container and what the runtime kept of it. NotFound when already gone.
  virtual Status Remove(const std::string& id) = 0;

  // Makes what a tenancy owns in the backend match its record: its network, and one volume per
  // entitled NFS export. Idempotent; blocks on the runtime. Backends without such objects: Ok.
  virtual Status PrepareTenancy(const std::string& tenancy,
                                const tenancy::StorageEntitlements& storage) {
    (void)tenancy;
    (void)storage;
    return Ok();
  }
  // The post-lease check of GPUs on another node, which the service cannot read itself: waits up
  // to `timeout` for the backend's verdict on the GPUs container `id` held (Kubernetes: the
  // firmware-check Job of its GpuLease). Backends that run no check of their own (local, null)
  // only place GPUs the service reads itself, so the service never asks them.
  virtual Result<GpuCheckVerdict> AwaitGpuCheck(const std::string& id,
                                                std::chrono::milliseconds timeout) {
    (void)id;
    (void)timeout;
    return FailedPrecondition(name() + " backend runs no GPU checks of its own");
  }
  // GPU ID ("<PCI>@<node>") -> what that node's agent measured last, for the GPUs of other nodes
  // (the dashboard's bars in fleet mode). Backends that learn nothing of other nodes: none.
  virtual std::map<std::string, GpuGaugeReading> GpuGauges() { return {}; }

  // The runtime's own ID of a running container (podman's 64-hex container ID): what the kernel's
  // cgroup paths of its processes name, for GPU telemetry. NotFound when the backend cannot tell
  // (or the container runs elsewhere).
  virtual Result<std::string> RuntimeId(const std::string& id) {
    return NotFound(name() + " backend: no runtime ID for " + id);
  }
  // Where the container's published ports are reached and whether it is ready, for backends that
  // choose the addresses or probe readiness themselves (Kubernetes: the Service, the Pod's Ready
  // condition). NotFound when the backend does neither (the service's own ports and probe hold).
  virtual Result<Exposure> Exposed(const std::string& id) {
    return NotFound(name() + " backend: no exposure of its own for " + id);
  }
  // Removes them after the tenancy was deleted (FailedPrecondition while anything still uses
  // them).
  virtual Status ReleaseTenancy(const std::string& tenancy) {
    (void)tenancy;
    return Ok();
  }
};

// A backend that hands every call to another: the base of decorators (placement made durable
// first, fabric partitions around each container), which override only what they change.
class ForwardingBackend : public ContainerBackend {
 public:
  explicit ForwardingBackend(std::unique_ptr<ContainerBackend> inner) : inner_(std::move(inner)) {}

  std::string name() const override { return inner_->name(); }
  Status CheckIsolation(fleet::Isolation isolation, int gpus) const override {
    return inner_->CheckIsolation(isolation, gpus);
  }
  Status CheckShare(fleet::Isolation isolation) const override {
    return inner_->CheckShare(isolation);
  }
  Status Start(const StartRequest& request, ExitCallback on_exit) override {
    return inner_->Start(request, std::move(on_exit));
  }
  Status Watch(const std::string& id, ExitCallback on_exit) override {
    return inner_->Watch(id, std::move(on_exit));
  }
  Status Resume(const std::string& id, ExitCallback on_exit) override {
    return inner_->Resume(id, std::move(on_exit));
  }
  Status Stop(const std::string& id, std::chrono::seconds grace) override {
    return inner_->Stop(id, grace);
  }
  Result<BackendContainer> Inspect(const std::string& id) override { return inner_->Inspect(id); }
  Result<std::string> Logs(const std::string& id) override { return inner_->Logs(id); }
  Result<LogPart> LogsFrom(const std::string& id, uint64_t offset) override {
    return inner_->LogsFrom(id, offset);
  }
  Result<std::vector<BackendContainer>> List() override { return inner_->List(); }
  Status Remove(const std::string& id) override { return inner_->Remove(id); }
  Result<std::string> RuntimeId(const std::string& id) override { return inner_->RuntimeId(id); }
  Result<Exposure> Exposed(const std::string& id) override { return inner_->Exposed(id); }
  std::map<std::string, GpuGaugeReading> GpuGauges() override { return inner_->GpuGauges(); }
  Status PrepareTenancy(const std::string& tenancy,
                        const tenancy::StorageEntitlements& storage) override {
    return inner_->PrepareTenancy(tenancy, storage);
  }
  Result<GpuCheckVerdict> AwaitGpuCheck(const std::string& id,
                                        std::chrono::milliseconds timeout) override {
    return inner_->AwaitGpuCheck(id, timeout);
  }
  Status ReleaseTenancy(const std::string& tenancy) override {
    return inner_->ReleaseTenancy(tenancy);
  }

 protected:
  ContainerBackend& inner() { return *inner_; }

 private:
  std::unique_ptr<ContainerBackend> inner_;
};

}  // namespace tessera::backends

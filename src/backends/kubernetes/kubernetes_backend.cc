// The Kubernetes ContainerBackend. One list+watch of this instance's Pods (label selector, every
// namespace, resumed from its resourceVersion and relisted on 410 Gone) finds exits; no Pod is
// polled. A driver thread hands exits to their callbacks and walks each ended container's
// GpuLease through the firmware-check Job to a final state.
#include "backends/kubernetes/kubernetes_backend.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "backends/kubernetes/controller.h"
#include "backends/kubernetes/node_gpus.h"
#include "backends/kubernetes/objects.h"
#include "backends/kubernetes/publication.h"
#include "backends/kubernetes/state_objects.h"
#include "common/untrusted_text.h"

namespace tessera::backends {
namespace {

using k8s::Json;
using k8s::Resource;

constexpr const char* kInstanceLabel = "tessera.dev/instance";
constexpr const char* kIdLabel = "tessera.dev/container-id";

k8s::Isolation ToK8s(fleet::Isolation isolation) {
  switch (isolation) {
    case fleet::Isolation::kGvisor:
      return k8s::Isolation::kGvisor;
    case fleet::Isolation::kKata:
      return k8s::Isolation::kKata;
    default:
      return k8s::Isolation::kRunc;
  }
}

// A Kubernetes time ("2024-05-01T12:00:00Z", RFC 3339, fractions and offsets allowed) in Unix
// ms; 0 when it is not one.
int64_t TimeMs(const Json& value) {
  if (!value.is_string()) return 0;
  const std::string& text = value.get_ref<const std::string&>();
  std::tm tm{};
  int consumed = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &consumed) != 6)
    return 0;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  const time_t seconds = timegm(&tm);
  if (seconds <= 0) return 0;
  std::string_view rest = std::string_view(text).substr(static_cast<size_t>(consumed));
  int64_t ms = 0;
  if (!rest.empty() && rest[0] == '.') {
    int digits = 0;
    size_t i = 1;
    for (; i < rest.size() && std::isdigit(static_cast<unsigned char>(rest[i])); ++i)
      if (digits < 3) ms = ms * 10 + (rest[i] - '0'), ++digits;
    for (; digits < 3; ++digits)
      ms *= 10;
    rest = rest.substr(i);
  }
  int64_t offset_s = 0;
  if (rest.size() == 6 && (rest[0] == '+' || rest[0] == '-')) {
    int hours = 0, minutes = 0;
    if (std::sscanf(std::string(rest.substr(1)).c_str(), "%2d:%2d", &hours, &minutes) != 2)
      return 0;
    offset_s = (rest[0] == '+' ? 1 : -1) * (hours * 3600 + minutes * 60);
  } else if (rest != "Z") {
    return 0;
  }
  return (static_cast<int64_t>(seconds) - offset_s) * 1000 + ms;
}

BackendContainer FromPod(const Json& pod) {
  BackendContainer c;
  c.id = pod["metadata"].value("labels", Json::object()).value(kIdLabel, "");
  std::string phase = pod.value("status", Json::object()).value("phase", "");
  if (phase == "Pending") c.state = BackendState::kCreated;
  if (phase == "Running") c.state = BackendState::kRunning;
  if (phase == "Succeeded" || phase == "Failed") {
    c.state = BackendState::kExited;
    for (const auto& s : pod["status"].value("containerStatuses", Json::array())) {
      const Json& terminated = s.value("state", Json::object()).value("terminated", Json::object());
      if (terminated.contains("exitCode") && terminated["exitCode"].is_number_integer())
        c.exit_code = terminated["exitCode"].get<int>();
      // The container's own times, as the kubelet recorded them: billing follows them.
      if (terminated.contains("finishedAt")) c.finished_ms = TimeMs(terminated["finishedAt"]);
      if (terminated.contains("startedAt")) c.started_ms = TimeMs(terminated["startedAt"]);
    }
    if (!c.exit_code) c.exit_code = phase == "Succeeded" ? 0 : 1;
  }
  return c;
}

// How an ended Pod's container ended, its end as the kubelet recorded it.
ExitInfo ExitOf(const BackendContainer& c) {
  ExitInfo info{c.exit_code, false, ""};
  info.finished_ms = c.finished_ms;
  return info;
}

class KubernetesBackend final : public ContainerBackend {
 public:
  explicit KubernetesBackend(KubernetesBackendOptions options)
      : options_(std::move(options)),
        client_(options_.client),
        driver_([this] { Drive(); }),
        pod_watcher_([this] { WatchPods(); }) {
    if (options_.tenancy_controller) controller_ = std::thread([this] { RunTenancyController(); });
  }

  ~KubernetesBackend() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    stop_watches_ = true;
    driver_.join();
    pod_watcher_.join();
    if (controller_.joinable()) controller_.join();
  }

  std::string name() const override { return "kubernetes"; }

  // The GPU count does not change the answer here: whether a node's runtime can pass GPUs
  // through (runsc with nvproxy, Kata with VFIO) is that node's setup, which `tessera doctor`
  // checks there; the cluster only tells whether the RuntimeClass exists.
  Status CheckIsolation(fleet::Isolation isolation, int /*gpus*/) const override {
    auto runtime_class = k8s::RuntimeClassFor(ToK8s(isolation));
    if (!runtime_class) return Ok();
    std::lock_guard<std::mutex> lock(client_mu_);
    auto found = client_.Get(Resource::RuntimeClasses(), "", *runtime_class);
    if (found) return Ok();
    if (found.error().category == ErrorCategory::kNotFound)
      return FailedPrecondition("RuntimeClass " + *runtime_class +
                                " is not installed in the cluster (deploy/runtimeclasses.yaml)");
    return found.error();
  }

  Status Start(const StartRequest& request, ExitCallback on_exit) override {
    auto ns = k8s::TenantNamespace(request.tenancy);
    if (!ns) return ns.error();
    k8s::PodRequest pod = PodRequestFor(request);
    // The volumes were checked against the tenancy's entitlements by the control plane; the
    // exports they name become nfs volumes (or PV/PVC pairs) and NFS egress exceptions.
    // The namespace policy covers every export the tenancy is entitled to (PrepareTenancy),
    // not only this submission's, so starting one Pod never narrows another's egress.
    std::vector<k8s::NfsEntitlement> entitlements = EntitlementsOf(request.tenancy);
    for (const auto& volume : request.volumes) {
      bool known = std::any_of(entitlements.begin(), entitlements.end(),
                               [&](const auto& e) { return e.name == volume.source.name; });
      if (!known) entitlements.push_back(ToEntitlement(volume.source));
      pod.volumes.push_back({volume.source.name, volume.mount_path, volume.read_only});
    }
    auto built = k8s::BuildPod(pod, entitlements);
    if (!built) return built.error();
    k8s::LeaseSpec lease;
    lease.name = pod.lease_name;
    lease.tenancy = request.tenancy;
    lease.node = pod.node;
    lease.gpu_ids = request.gpu_pci_addresses;
    lease.pod_namespace = *ns;
    lease.pod_name = pod.name;
    std::lock_guard<std::mutex> lock(client_mu_);
    // The tenancy's namespace and isolation policies come first (idempotent).
    if (auto r = EnsureTenancyObjects(request.tenancy, *ns, entitlements); !r) return r.error();
    // Labels the backend finds its Pods by (and the caller's extras).
    Json identity = {{kInstanceLabel, options_.instance}, {kIdLabel, pod.name.substr(8)}};
    Json labels = identity;
    for (const auto& [k, v] : request.labels)
      labels[k] = v;
    // Published ports: the Service (and ingress policies) before the Pod, owned by it after.
    std::optional<k8s::Publication> publication;
    if (!pod.ports.empty()) {
      publication = k8s::Publication{
          request.tenancy,         pod.name, identity, pod.ports, options_.publish_service_type,
          options_.publish_ingress};
      if (auto r = k8s::CreatePublication(client_, *publication, options_.cilium); !r) {
        (void)k8s::DeletePublication(client_, *ns, pod.name, options_.cilium);
        return r.error();
      }
    }
    auto created = StartWithLabels(pod, entitlements, lease, labels, request.id);
    if (!created) {
      // Not when the Pod is there already: what it published stays with it.
      if (publication && created.error().category != ErrorCategory::kAlreadyExists)
        (void)k8s::DeletePublication(client_, *ns, pod.name, options_.cilium);
      return created.error();
    }
    if (publication)
      k8s::AdoptPublication(client_, *publication, options_.cilium,
                            k8s::StringField(k8s::ObjectField(*created, "metadata"), "uid"));
    Follow(request.id, *ns, pod.name, lease.gpu_ids.empty() ? "" : lease.name,
           !pod.resource_claim.empty(), std::move(on_exit));
    return Ok();
  }

  // Remembers the tenancy's exports and makes its namespace, isolation policies (with NFS
  // egress to every entitled server) and, in pv mode, its PV/PVC pairs match them.
  Status PrepareTenancy(const std::string& tenancy,
                        const tenancy::StorageEntitlements& storage) override {
    std::vector<k8s::NfsEntitlement> entitlements;
    for (const auto& nfs : storage.nfs)
      entitlements.push_back(ToEntitlement(nfs));
    {
      std::lock_guard<std::mutex> lock(mu_);
      entitlements_[tenancy] = entitlements;
    }
    auto ns = k8s::TenantNamespace(tenancy);
    if (!ns) return ns.error();
    std::lock_guard<std::mutex> lock(client_mu_);
    return EnsureTenancyObjects(tenancy, *ns, entitlements);
  }

  Status Watch(const std::string& id, ExitCallback on_exit) override {
    auto pod = FindPod(id);
    if (!pod) return pod.error();
    std::string lease =
        (*pod)["metadata"].value("labels", Json::object()).value("tessera.dev/lease", "");
    const Json& claims = (*pod)["spec"].value("resourceClaims", Json::array());
    Follow(id, (*pod)["metadata"].value("namespace", ""), (*pod)["metadata"].value("name", ""),
           lease, claims.is_array() && !claims.empty(), std::move(on_exit));
    return Ok();
  }

  // The lease's verdict: it is walked on (checking, firmware-check Job) here as well, so a lease
  // whose container ended while the service was down reaches a verdict too.
  Result<GpuCheckVerdict> AwaitGpuCheck(const std::string& id,
                                        std::chrono::milliseconds timeout) override {
    const std::string name = "lease-" + PodNameFor(id);
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      {
        std::lock_guard<std::mutex> lock(client_mu_);
        auto lease = client_.Get(Resource::GpuLeases(), "", name);
        if (!lease && lease.error().category == ErrorCategory::kNotFound)
          return GpuCheckVerdict{false, "GpuLease " + name + " is missing"};
        if (lease) {
          auto state = k8s::ReconcileLease(client_, *lease, options_.firmware_check);
          if (state && *state == "free") return GpuCheckVerdict{true, ""};
          if (state && *state == "quarantined") {
            auto now = client_.Get(Resource::GpuLeases(), "", name);
            std::string reason =
                now ? (*now).value("status", Json::object()).value("reason", "") : "";
            return GpuCheckVerdict{
                false, "GpuLease " + name + " quarantined" + (reason.empty() ? "" : ": " + reason)};
          }
        }
      }
      if (std::chrono::steady_clock::now() >= deadline)
        return GpuCheckVerdict{false, "GpuLease " + name + ": no check verdict within " +
                                          std::to_string(timeout.count()) + " ms"};
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait_for(lock, std::chrono::milliseconds(200), [this] { return stopping_; });
        if (stopping_) return Unavailable("backend stopping");
      }
    }
  }

  Status Stop(const std::string& id, std::chrono::seconds grace) override {
    auto pod = FindPod(id);
    if (!pod) return pod.error();
    std::lock_guard<std::mutex> lock(client_mu_);
    return client_.Delete(Resource::Pods(), (*pod)["metadata"].value("namespace", ""),
                          (*pod)["metadata"].value("name", ""), int(grace.count()));
  }

  Result<BackendContainer> Inspect(const std::string& id) override {
    auto pod = FindPod(id);
    if (!pod) return pod.error();
    BackendContainer c = FromPod(*pod);
    c.id = id;
    return c;
  }

  Result<std::string> Logs(const std::string& id) override {
    auto pod = FindPod(id);
    if (!pod) return pod.error();
    std::lock_guard<std::mutex> lock(client_mu_);
    return client_.GetText(Resource::Pods().Path((*pod)["metadata"].value("namespace", ""),
                                                 (*pod)["metadata"].value("name", "")) +
                           "/log");
  }

  Result<std::vector<BackendContainer>> List() override {
    std::lock_guard<std::mutex> lock(client_mu_);
    auto pods =
        client_.List(Resource::Pods(), "", std::string(kInstanceLabel) + "=" + options_.instance);
    if (!pods) return pods.error();
    std::vector<BackendContainer> out;
    for (const auto& pod : (*pods).value("items", Json::array())) {
      BackendContainer c = FromPod(pod);
      c.id = pod["metadata"].value("annotations", Json::object()).value("tessera.dev/id", c.id);
      out.push_back(c);
    }
    return out;
  }

  Status Remove(const std::string& id) override {
    auto pod = FindPod(id);
    if (!pod) {
      // Its Pod is gone: what it published (found by its labels) goes too.
      if (pod.error().category == ErrorCategory::kNotFound) {
        std::lock_guard<std::mutex> lock(client_mu_);
        auto swept =
            k8s::DeletePublicationsLabelled(client_, IdentitySelector(id), options_.cilium);
        if (!swept) spdlog::warn("container {}: published objects: {}", id, swept.error().message);
      }
      return pod.error();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      followed_.erase(id);
    }
    const Json& metadata = k8s::ObjectField(*pod, "metadata");
    const std::string ns = k8s::StringField(metadata, "namespace");
    const std::string name = k8s::StringField(metadata, "name");
    std::lock_guard<std::mutex> lock(client_mu_);
    if (auto deleted = client_.Delete(Resource::Pods(), ns, name); !deleted) return deleted;
    // A Pod that declares ports published them (a Pod it cannot read: in case it did).
    auto exposure = k8s::PodExposureOf(*pod);
    if (exposure && exposure->ports.empty()) return Ok();
    return k8s::DeletePublication(client_, ns, name, options_.cilium);
  }

  // The Service's addresses of the container's ports and the Pod's Ready condition.
  Result<Exposure> Exposed(const std::string& id) override {
    auto pod = FindPod(id);
    if (!pod) return pod.error();
    std::lock_guard<std::mutex> lock(client_mu_);
    return k8s::ReadExposure(client_, *pod);
  }

 private:
  // The Pod of a start request, volumes apart.
  k8s::PodRequest PodRequestFor(const StartRequest& request) const {
    k8s::PodRequest pod;
    pod.tenancy = request.tenancy;
    pod.name = PodNameFor(request.id);
    pod.image = request.image;
    pod.command = request.command;
    pod.env = request.env;
    pod.isolation = ToK8s(request.isolation);
    pod.gpu_resource =
        pod.isolation == k8s::Isolation::kKata ? "nvidia.com/pgpu" : "nvidia.com/gpu";
    pod.gpus = int(std::max(request.gpu_pci_addresses.size(), request.cdi_devices.size()));
    // The node the fleet placement chose; without GPUs, the --k8s-node restriction (or any).
    pod.node = request.node.empty() ? options_.node : request.node;
    pod.lease_name = "lease-" + pod.name;
    // DRA: the Pod references a claim pinned to the leased GPUs (named after the lease).
    if (options_.gpu_api == k8s::GpuApi::kDra && !request.gpu_pci_addresses.empty())
      pod.resource_claim = pod.lease_name;
    pod.nfs_mode = options_.nfs_mode;
    for (const auto& port : request.ports)
      pod.ports.push_back({port.container_port, port.name, port.protocol});
    if (request.ready) pod.ready = k8s::HttpReadiness{request.ready->path, request.ready->port};
    return pod;
  }

  // client_mu_ held. The tenancy's namespace, isolation policies (with NFS egress to every
  // entitled server) and, in pv mode, its PV/PVC pairs (idempotent).
  Status EnsureTenancyObjects(const std::string& tenancy, const std::string& ns,
                              const std::vector<k8s::NfsEntitlement>& entitlements) {
    if (auto r =
            k8s::EnsureObject(client_, Resource::Namespaces(), "", k8s::BuildNamespace(tenancy));
        !r)
      return r.error();
    if (auto r = k8s::EnsureObject(client_, Resource::NetworkPolicies(), ns,
                                   k8s::BuildNetworkPolicy(tenancy, entitlements));
        !r)
      return r.error();
    if (options_.cilium) {
      if (auto r = k8s::EnsureObject(client_, Resource::CiliumNetworkPolicies(), ns,
                                     k8s::BuildCiliumNetworkPolicy(tenancy, entitlements));
          !r)
        return r.error();
    }
    if (options_.nfs_mode != k8s::NfsMode::kPersistentVolume) return Ok();
    for (const auto& entitlement : entitlements) {
      if (auto r = k8s::EnsureObject(client_, Resource::PersistentVolumes(), "",
                                     k8s::BuildNfsPersistentVolume(tenancy, entitlement));
          !r)
        return r.error();
      if (auto r = k8s::EnsureObject(client_, Resource::PersistentVolumeClaims(), ns,
                                     k8s::BuildNfsPersistentVolumeClaim(tenancy, entitlement));
          !r)
        return r.error();
    }
    return Ok();
  }

  static k8s::NfsEntitlement ToEntitlement(const tenancy::NfsExport& nfs) {
    return {nfs.name, nfs.server, nfs.path, nfs.read_only};
  }
  std::vector<k8s::NfsEntitlement> EntitlementsOf(const std::string& tenancy) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entitlements_.find(tenancy);
    return it == entitlements_.end() ? std::vector<k8s::NfsEntitlement>{} : it->second;
  }

  struct Followed {
    std::string ns, pod, lease;
    // DRA: the lease's pinned claim has not been seen allocated yet; until it is, the driver
    // compares its allocation with the lease.
    bool claim_undecided = false;
    // Why the container is failed whatever its Pod does (a claim allocated other GPUs).
    std::string failure;
    ExitCallback on_exit;
    bool exited = false;     // the exit was seen (queued or delivered)
    bool delivered = false;  // on_exit ran
  };

  // What the Pod watch last saw of a Pod of this instance, by fleet ID.
  struct SeenPod {
    std::string ns, name;
    bool deleted = false;
    BackendContainer state;
  };

  Result<Json> StartWithLabels(const k8s::PodRequest& request,
                               const std::vector<k8s::NfsEntitlement>& entitlements,
                               const k8s::LeaseSpec& lease, const Json& labels,
                               const std::string& id) {
    auto pod = k8s::BuildPod(request, entitlements);
    if (!pod) return pod.error();
    for (auto it = labels.begin(); it != labels.end(); ++it)
      (*pod)["metadata"]["labels"][it.key()] = it.value();
    // The fleet ID verbatim (labels cannot hold every character an ID may have).
    (*pod)["metadata"]["annotations"] = {{"tessera.dev/id", id}};
    if (lease.gpu_ids.empty()) {
      return client_.Create(Resource::Pods(), lease.pod_namespace, *pod);
    }
    // Lease before Pod, as StartPod does; the Pod carries our labels.
    auto created = client_.Create(Resource::GpuLeases(), "", k8s::BuildGpuLease(lease));
    if (!created && created.error().category != ErrorCategory::kAlreadyExists)
      return created.error();
    // DRA: then the claim the Pod references, pinned to the leased GPUs.
    if (!request.resource_claim.empty()) {
      auto claim = k8s::CreatePinnedClaim(client_, request, lease, lease.pod_namespace);
      if (!claim) return claim.error();
    }
    auto live = client_.Create(Resource::Pods(), lease.pod_namespace, *pod);
    if (!live) return live.error();
    Json status = {
        {"status",
         {{"state", "active"}, {"reason", "pod " + lease.pod_namespace + "/" + lease.pod_name}}}};
    (void)client_.Patch(Resource::GpuLeases(), "", lease.name, status, k8s::PatchType::kMerge,
                        "status");
    return live;
  }

  Result<Json> FindPod(const std::string& id) {
    // mu_ is never held while taking client_mu_: Start holds client_mu_ and then takes mu_.
    std::optional<std::pair<std::string, std::string>> known;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = followed_.find(id);
      if (it != followed_.end()) known.emplace(it->second.ns, it->second.pod);
    }
    if (known) {
      std::lock_guard<std::mutex> client_lock(client_mu_);
      return client_.Get(Resource::Pods(), known->first, known->second);
    }
    std::lock_guard<std::mutex> lock(client_mu_);
    auto pods =
        client_.List(Resource::Pods(), "", std::string(kInstanceLabel) + "=" + options_.instance);
    if (!pods) return pods.error();
    for (const auto& pod : (*pods).value("items", Json::array())) {
      if (pod["metadata"].value("annotations", Json::object()).value("tessera.dev/id", "") == id)
        return pod;
    }
    return NotFound("container " + id + ": no pod with that ID");
  }

  // The labels of a container's Pod and of what it published.
  std::string IdentitySelector(const std::string& id) const {
    return std::string(kInstanceLabel) + "=" + options_.instance + "," + kIdLabel + "=" +
           PodNameFor(id).substr(8);
  }

  static std::string IdOf(const Json& pod) {
    return pod["metadata"].value("annotations", Json::object()).value("tessera.dev/id", "");
  }

  // Registers the container and, when the Pod watch already saw it end (it may end before its
  // start returns, or between a restart's List and Watch), queues the exit at once.
  void Follow(const std::string& id, const std::string& ns, const std::string& pod,
              const std::string& lease, bool pinned_claim, ExitCallback on_exit) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      followed_[id] =
          Followed{ns, pod, lease, pinned_claim && !lease.empty(), "", std::move(on_exit)};
      auto seen = seen_.find(id);
      if (seen != seen_.end()) {
        if (seen->second.deleted) {
          QueueExitLocked(id, ExitInfo{std::nullopt, true, "pod " + ns + "/" + pod + " vanished"});
        } else if (seen->second.state.state == BackendState::kExited) {
          QueueExitLocked(id, ExitOf(seen->second.state));
        }
      }
    }
    wake_.notify_all();
  }

  // mu_ held. The first exit of a followed container is queued for the driver thread, which runs
  // the callback (the watch thread must keep reading its stream).
  void QueueExitLocked(const std::string& id, ExitInfo info) {
    auto it = followed_.find(id);
    if (it == followed_.end() || it->second.exited) return;
    it->second.exited = true;
    if (!it->second.failure.empty()) info = ExitInfo{std::nullopt, true, it->second.failure};
    exits_.emplace_back(id, std::move(info));
  }

  // mu_ held. One Pod as the watch reports it.
  void SeePodLocked(const Json& pod, bool deleted) {
    std::string id = IdOf(pod);
    if (id.empty()) return;
    SeenPod seen{pod["metadata"].value("namespace", ""), pod["metadata"].value("name", ""), deleted,
                 FromPod(pod)};
    if (deleted) {
      if (seen.state.state == BackendState::kExited) {
        QueueExitLocked(id, ExitOf(seen.state));
      } else {
        QueueExitLocked(
            id, ExitInfo{std::nullopt, true, "pod " + seen.ns + "/" + seen.name + " vanished"});
      }
    } else if (seen.state.state == BackendState::kExited) {
      QueueExitLocked(id, ExitOf(seen.state));
    }
    seen_[id] = std::move(seen);
  }

  // The Pod watch: one list+watch of every Pod labelled with this instance, in every namespace.
  // Own client: the watch holds its connection open for as long as the server keeps it.
  void WatchPods() {
    k8s::Client client(options_.client);
    const std::string selector = std::string(kInstanceLabel) + "=" + options_.instance;
    while (!stop_watches_) {
      auto status = client.ListWatch(
          Resource::Pods(), "", "",
          [&](const k8s::WatchEvent& event) {
            if (event.type == "SYNC") {
              // A (re)list: events may have been missed (410 Gone), so the list is the truth.
              std::vector<std::pair<std::string, Followed>> unseen;
              {
                std::lock_guard<std::mutex> lock(mu_);
                seen_.clear();
                for (const auto& pod : event.object.value("items", Json::array()))
                  SeePodLocked(pod, false);
                for (const auto& [id, f] : followed_)
                  if (!f.exited && !seen_.count(id)) unseen.emplace_back(id, f);
              }
              // Followed but not listed: gone, or created after the list was taken. Ask.
              for (const auto& [id, f] : unseen) {
                auto pod = client.Get(Resource::Pods(), f.ns, f.pod);
                std::lock_guard<std::mutex> lock(mu_);
                if (pod) {
                  SeePodLocked(*pod, false);
                } else if (pod.error().category == ErrorCategory::kNotFound) {
                  QueueExitLocked(
                      id, ExitInfo{std::nullopt, true, "pod " + f.ns + "/" + f.pod + " vanished"});
                }
              }
            } else if (event.type == "ADDED" || event.type == "MODIFIED" ||
                       event.type == "DELETED") {
              std::lock_guard<std::mutex> lock(mu_);
              SeePodLocked(event.object, event.type == "DELETED");
            }
            wake_.notify_all();
            return !stop_watches_.load();
          },
          &stop_watches_, selector);
      if (!status) {
        spdlog::warn("pod watch: {}", status.error().message);
        std::this_thread::sleep_for(std::chrono::seconds(1));
      }
    }
  }

  // Own client: the watch runs in this thread while the driver uses client_.
  void RunTenancyController() {
    k8s::Client client(options_.client);
    k8s::TenancyControllerOptions reconcile{options_.cilium, options_.nfs_mode};
    auto reconcile_one = [&](const Json& tenancy) {
      if (options_.leading && !options_.leading()) return;
      auto status = k8s::ReconcileTenancy(client, tenancy, reconcile);
      if (!status)
        spdlog::warn("tenancy {}: {}", tenancy["metadata"].value("name", ""),
                     status.error().message);
    };
    while (!stop_watches_) {
      // One round: list (reconciling everything), then watch until the resync interval ends;
      // the next round relists, which repairs drift nobody was told about.
      std::atomic<bool> round_over{false};
      std::thread timer([&] {
        auto until = std::chrono::steady_clock::now() + options_.tenancy_resync;
        while (std::chrono::steady_clock::now() < until && !stop_watches_)
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        round_over = true;
      });
      auto status = client.ListWatch(
          Resource::Tenancies(), "", "",
          [&](const k8s::WatchEvent& event) {
            if (event.type == "SYNC") {
              for (const auto& item : event.object.value("items", Json::array()))
                reconcile_one(item);
            } else if (event.type == "ADDED" || event.type == "MODIFIED") {
              reconcile_one(event.object);
            }
            return true;
          },
          &round_over);
      timer.join();
      if (!status) spdlog::warn("tenancy controller: {}", status.error().message);
    }
  }

  // Delivers queued exits, then walks the GpuLease of every ended container one step (checking
  // with a firmware-check Job, then free or quarantined) each `lease_interval`.
  void Drive() {
    std::unique_lock<std::mutex> lock(mu_);
    auto next_walk = std::chrono::steady_clock::now();
    while (!stopping_) {
      wake_.wait_until(lock, next_walk, [this] { return stopping_ || !exits_.empty(); });
      if (stopping_) break;
      auto exits = std::move(exits_);
      exits_.clear();
      lock.unlock();
      bool delivered = false;
      for (auto& [id, info] : exits) {
        ExitCallback callback;
        std::string lease_name;
        {
          std::lock_guard<std::mutex> relock(mu_);
          auto it = followed_.find(id);
          if (it == followed_.end() || it->second.delivered) continue;
          it->second.delivered = true;
          callback = it->second.on_exit;
          lease_name = it->second.lease;
        }
        // What the node agent measured of the Pod's GPU processes (status.measured) goes into the
        // usage record with the exit.
        if (!lease_name.empty()) info.measured = MeasuredOfLease(lease_name);
        delivered = true;
        if (callback) callback(id, info);
      }
      lock.lock();
      if (!delivered && std::chrono::steady_clock::now() < next_walk) continue;
      next_walk = std::chrono::steady_clock::now() + options_.lease_interval;
      std::vector<std::pair<std::string, std::string>> leases;     // id, lease
      std::vector<std::pair<std::string, std::string>> undecided;  // id, lease
      for (const auto& [id, f] : followed_) {
        if (f.delivered && !f.lease.empty()) leases.emplace_back(id, f.lease);
        if (!f.exited && f.claim_undecided) undecided.emplace_back(id, f.lease);
      }
      lock.unlock();
      for (const auto& [id, name] : undecided)
        CheckPinnedClaim(id, name);
      std::vector<std::string> done;
      for (const auto& [id, name] : leases) {
        std::lock_guard<std::mutex> client_lock(client_mu_);
        auto lease = client_.Get(Resource::GpuLeases(), "", name);
        if (!lease) continue;
        auto state = k8s::ReconcileLease(client_, *lease, options_.firmware_check);
        if (state && (*state == "free" || *state == "quarantined")) done.push_back(id);
      }
      RefreshGauges();
      lock.lock();
      for (const auto& id : done) {
        auto it = followed_.find(id);
        if (it != followed_.end()) it->second.lease.clear();
      }
    }
  }

  std::map<std::string, GpuGaugeReading> GpuGauges() override {
    std::lock_guard<std::mutex> lock(gauges_mu_);
    return gauges_;
  }

  // What the node agents last measured of their leased GPUs (status.measured.gauges), read
  // every 10 s with one list of the GpuLeases, for the dashboard.
  void RefreshGauges() {
    const auto now = std::chrono::steady_clock::now();
    if (now < next_gauges_) return;
    next_gauges_ = now + std::chrono::seconds(10);
    Result<Json> leases = Internal("");
    {
      std::lock_guard<std::mutex> client_lock(client_mu_);
      leases = client_.List(Resource::GpuLeases(), "");
    }
    if (!leases) return;
    std::map<std::string, GpuGaugeReading> gauges;
    auto number = [](const Json& object, const char* key) -> std::optional<double> {
      auto it = object.find(key);
      if (it == object.end() || !it->is_number() || it->get<double>() < 0) return std::nullopt;
      return it->get<double>();
    };
    for (const auto& lease : (*leases).value("items", Json::array())) {
      if (!lease.is_object()) continue;
      const Json status = lease.value("status", Json::object());
      const std::string state = status.is_object() ? status.value("state", "reserved") : "";
      if (state != "reserved" && state != "active") continue;
      const Json spec = lease.value("spec", Json::object());
      const Json measured = status.value("measured", Json::object());
      if (!spec.is_object() || !measured.is_object()) continue;
      const std::string node = spec.value("node", "");
      const Json per_gpu = measured.value("gauges", Json::object());
      if (node.empty() || node.size() > 253 || !per_gpu.is_object()) continue;
      for (const auto& [pci, g] : per_gpu.items()) {
        if (pci.size() > 32 || !g.is_object() || gauges.size() >= 100000) continue;
        GpuGaugeReading reading;
        reading.util_percent = number(g, "utilPercent");
        if (auto used = number(g, "memoryUsed")) reading.memory_used = static_cast<uint64_t>(*used);
        if (auto total = number(g, "memoryTotal"))
          reading.memory_total = static_cast<uint64_t>(*total);
        reading.power_watts = number(g, "powerWatts");
        reading.time_ms = static_cast<int64_t>(number(measured, "updatedMs").value_or(0));
        gauges[pci + "@" + node] = reading;
      }
    }
    std::lock_guard<std::mutex> lock(gauges_mu_);
    gauges_ = std::move(gauges);
  }

  // The node agent's measurement of a lease's Pod; nullopt when it has none (or says nothing
  // readable).
  std::optional<fleet::MeasuredUsage> MeasuredOfLease(const std::string& name) {
    std::lock_guard<std::mutex> client_lock(client_mu_);
    auto lease = client_.Get(Resource::GpuLeases(), "", name);
    if (!lease || !(*lease).contains("status") || !(*lease)["status"].is_object() ||
        !(*lease)["status"].contains("measured"))
      return std::nullopt;
    auto measured =
        k8s::MeasuredOf((*lease)["status"], "measured", "lease " + name + " status.measured");
    if (!measured) {
      spdlog::warn("{}", measured.error().message);
      return std::nullopt;
    }
    return *measured;
  }

  // DRA, while the container has not ended: once the scheduler allocated its pinned claim,
  // anything but the leased GPUs fails it (ReconcileLease deletes the Pod and records why); it
  // never runs on other GPUs. Polled only until the allocation is seen.
  void CheckPinnedClaim(const std::string& id, const std::string& lease_name) {
    std::lock_guard<std::mutex> client_lock(client_mu_);
    auto lease = client_.Get(Resource::GpuLeases(), "", lease_name);
    if (!lease) return;
    auto mismatch = k8s::PinnedClaimMismatch(client_, *lease);
    if (!mismatch) {
      spdlog::warn("lease {}: claim: {}", lease_name, mismatch.error().message);
      return;
    }
    if (!*mismatch) return;  // not allocated yet
    const std::string& reason = **mismatch;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = followed_.find(id);
      if (it == followed_.end()) return;
      // Recorded before the Pod is deleted, so its deletion reaches the caller as this reason.
      it->second.failure = reason;
      if (reason.empty()) it->second.claim_undecided = false;
    }
    if (reason.empty()) {
      spdlog::info("container {}: claim allocated exactly the leased GPUs", id);
      return;
    }
    spdlog::warn("container {}: {}", id, reason);
    auto state = k8s::ReconcileLease(client_, *lease, options_.firmware_check);
    if (!state) {
      spdlog::warn("lease {}: {}", lease_name, state.error().message);
      return;  // tried again at the next walk
    }
    std::lock_guard<std::mutex> lock(mu_);
    auto it = followed_.find(id);
    if (it != followed_.end()) it->second.claim_undecided = false;
  }

  KubernetesBackendOptions options_;
  mutable std::mutex client_mu_;  // guards client_ (its last_error_)
  mutable k8s::Client client_;
  std::mutex mu_;  // guards followed_, seen_, exits_, stopping_, entitlements_
  std::map<std::string, std::vector<k8s::NfsEntitlement>> entitlements_;  // by tenancy
  std::condition_variable wake_;
  std::map<std::string, Followed> followed_;  // by fleet ID
  std::map<std::string, SeenPod> seen_;       // by fleet ID, from the Pod watch
  std::deque<std::pair<std::string, ExitInfo>> exits_;
  std::mutex gauges_mu_;  // guards gauges_
  std::map<std::string, GpuGaugeReading> gauges_;
  std::chrono::steady_clock::time_point next_gauges_{};  // the driver thread only
  bool stopping_ = false;
  std::atomic<bool> stop_watches_{false};  // Pod watch and tenancy controller
  std::thread driver_;
  std::thread pod_watcher_;
  std::thread controller_;
};

class NodeGpuWatchImpl final : public NodeGpuWatch {
 public:
  NodeGpuWatchImpl(k8s::ClientConfig config,
                   std::function<void(const std::vector<k8s::NodeGpus>&)> on_change)
      : client_(std::move(config)), on_change_(std::move(on_change)), thread_([this] { Run(); }) {}
  ~NodeGpuWatchImpl() override {
    stop_ = true;
    thread_.join();
  }

 private:
  void Run() {
    std::map<std::string, k8s::NodeGpus> nodes;  // by name, those that publish GPUs
    bool synced = false;
    auto see = [&](const Json& node, bool deleted) {
      std::string name = node["metadata"].value("name", "");
      auto gpus = k8s::NodeGpusOf(node);
      if (!gpus) spdlog::warn("{}", gpus.error().message);
      if (deleted || !gpus || !gpus->has_value()) return nodes.erase(name) > 0;
      auto it = nodes.find(name);
      if (it != nodes.end() && it->second == **gpus) return false;
      nodes[name] = std::move(**gpus);
      return true;
    };
    while (!stop_) {
      auto status = client_.ListWatch(
          Resource::Nodes(), "", "",
          [&](const k8s::WatchEvent& event) {
            bool changed = false;
            if (event.type == "SYNC") {
              nodes.clear();
              for (const auto& node : event.object.value("items", Json::array()))
                see(node, false);
              changed = synced = true;
            } else if (event.type == "ADDED" || event.type == "MODIFIED" ||
                       event.type == "DELETED") {
              changed = see(event.object, event.type == "DELETED");
            }
            if (changed && synced) {
              std::vector<k8s::NodeGpus> list;
              for (const auto& [name, gpus] : nodes)
                list.push_back(gpus);
              on_change_(list);
            }
            return !stop_.load();
          },
          &stop_);
      if (!status) {
        spdlog::warn("node watch: {}", status.error().message);
        for (int i = 0; i < 20 && !stop_; ++i)
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
  }

  k8s::Client client_;
  std::function<void(const std::vector<k8s::NodeGpus>&)> on_change_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace

std::unique_ptr<NodeGpuWatch> StartNodeGpuWatch(
    k8s::ClientConfig config, std::function<void(const std::vector<k8s::NodeGpus>&)> on_change) {
  return std::make_unique<NodeGpuWatchImpl>(std::move(config), std::move(on_change));
}

std::string PodNameFor(const std::string& id) {
  std::string name = "tessera-";
  for (char c : id) {
    char l = char(std::tolower(static_cast<unsigned char>(c)));
    name.push_back(std::isalnum(static_cast<unsigned char>(l)) ? l : '-');
  }
  if (name.size() > 63) name.resize(63);
  while (name.back() == '-')
    name.pop_back();
  return name;
}

Result<k8s::GpuApi> ChooseGpuApi(const k8s::ClientConfig& config, const std::string& flag) {
  if (!flag.empty()) {
    auto api = k8s::ParseGpuApi(flag);
    if (api) spdlog::info("kubernetes: GPU API {} (--k8s-gpu-api)", k8s::GpuApiName(*api));
    return api;
  }
  k8s::Client client(config);
  auto groups = client.GetText("/apis");
  std::string why;
  Json list;
  if (!groups) {
    why = "API discovery failed: " + groups.error().message;
  } else if (auto nesting = CheckJsonNesting(*groups, "/apis"); !nesting) {
    why = nesting.error().message;
  } else {
    list = Json::parse(*groups, nullptr, false);
    if (list.is_discarded()) why = "API discovery answered no JSON";
  }
  k8s::GpuApi api = k8s::DefaultGpuApi(list);
  if (why.empty())
    why = api == k8s::GpuApi::kDra ? "API discovery lists resource.k8s.io/v1"
                                   : "API discovery does not list resource.k8s.io/v1";
  spdlog::info("kubernetes: GPU API {} ({})", k8s::GpuApiName(api), why);
  return api;
}

std::unique_ptr<ContainerBackend> CreateKubernetesBackend(KubernetesBackendOptions options) {
  return std::make_unique<KubernetesBackend>(std::move(options));
}

}  // namespace tessera::backends

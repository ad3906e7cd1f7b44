// The Kubernetes ContainerBackend. One poller thread follows the Pods of watched containers
// (GET per Pod per interval: no cluster-wide watch needed, and a restart loses nothing because
// List() finds the Pods again by label) and drives their GpuLeases to a final state.
#include "backends/kubernetes/kubernetes_backend.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

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
      if (terminated.contains("exitCode")) c.exit_code = terminated["exitCode"].get<int>();
    }
    if (!c.exit_code) c.exit_code = phase == "Succeeded" ? 0 : 1;
  }
  return c;
}

class KubernetesBackend final : public ContainerBackend {
 public:
  explicit KubernetesBackend(KubernetesBackendOptions options)
      : options_(std::move(options)), client_(options_.client), poller_([this] { Poll(); }) {
    if (options_.tenancy_controller) controller_ = std::thread([this] { RunTenancyController(); });
  }

  ~KubernetesBackend() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    stop_controller_ = true;
    poller_.join();
    if (controller_.joinable()) controller_.join();
  }

  std::string name() const override { return "kubernetes"; }

  Status CheckIsolation(fleet::Isolation isolation) const override {
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
    pod.node = options_.node;
    pod.lease_name = "lease-" + pod.name;
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
    pod.nfs_mode = options_.nfs_mode;
    auto built = k8s::BuildPod(pod, entitlements);
    if (!built) return built.error();
    k8s::LeaseSpec lease{
        pod.lease_name, request.tenancy, options_.node, request.gpu_pci_addresses, *ns, pod.name};
    std::lock_guard<std::mutex> lock(client_mu_);
    // The tenancy's namespace and isolation policies come first (idempotent).
    if (auto r = k8s::EnsureObject(client_, Resource::Namespaces(), "",
                                   k8s::BuildNamespace(request.tenancy));
        !r)
      return r.error();
    if (auto r = k8s::EnsureObject(client_, Resource::NetworkPolicies(), *ns,
                                   k8s::BuildNetworkPolicy(request.tenancy, entitlements));
        !r)
      return r.error();
    if (options_.cilium) {
      if (auto r = k8s::EnsureObject(client_, Resource::CiliumNetworkPolicies(), *ns,
                                     k8s::BuildCiliumNetworkPolicy(request.tenancy, entitlements));
          !r)
        return r.error();
    }
    if (pod.nfs_mode == k8s::NfsMode::kPersistentVolume) {
      for (const auto& entitlement : entitlements) {
        if (auto r = k8s::EnsureObject(client_, Resource::PersistentVolumes(), "",
                                       k8s::BuildNfsPersistentVolume(request.tenancy, entitlement));
            !r)
          return r.error();
        if (auto r =
                k8s::EnsureObject(client_, Resource::PersistentVolumeClaims(), *ns,
                                  k8s::BuildNfsPersistentVolumeClaim(request.tenancy, entitlement));
            !r)
          return r.error();
      }
    }
    // Labels the backend finds its Pods by (and the caller's extras).
    Json labels = {{kInstanceLabel, options_.instance}, {kIdLabel, pod.name.substr(8)}};
    for (const auto& [k, v] : request.labels)
      labels[k] = v;
    k8s::PodRequest with_labels = pod;
    auto created = StartWithLabels(with_labels, entitlements, lease, labels, request.id);
    if (!created) return created.error();
    Follow(request.id, *ns, pod.name, lease.gpu_ids.empty() ? "" : lease.name, std::move(on_exit));
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
    if (auto r =
            k8s::EnsureObject(client_, Resource::Namespaces(), "", k8s::BuildNamespace(tenancy));
        !r)
      return r.error();
    if (auto r = k8s::EnsureObject(client_, Resource::NetworkPolicies(), *ns,
                                   k8s::BuildNetworkPolicy(tenancy, entitlements));
        !r)
      return r.error();
    if (options_.cilium) {
      if (auto r = k8s::EnsureObject(client_, Resource::CiliumNetworkPolicies(), *ns,
                                     k8s::BuildCiliumNetworkPolicy(tenancy, entitlements));
          !r)
        return r.error();
    }
    if (options_.nfs_mode == k8s::NfsMode::kPersistentVolume) {
      for (const auto& entitlement : entitlements) {
        if (auto r = k8s::EnsureObject(client_, Resource::PersistentVolumes(), "",
                                       k8s::BuildNfsPersistentVolume(tenancy, entitlement));
            !r)
          return r.error();
        if (auto r = k8s::EnsureObject(client_, Resource::PersistentVolumeClaims(), *ns,
                                       k8s::BuildNfsPersistentVolumeClaim(tenancy, entitlement));
            !r)
          return r.error();
      }
    }
    return Ok();
  }

  Status Watch(const std::string& id, ExitCallback on_exit) override {
    auto pod = FindPod(id);
    if (!pod) return pod.error();
    std::string lease =
        (*pod)["metadata"].value("labels", Json::object()).value("tessera.dev/lease", "");
    Follow(id, (*pod)["metadata"].value("namespace", ""), (*pod)["metadata"].value("name", ""),
           lease, std::move(on_exit));
    return Ok();
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
    if (!pod) return pod.error();
    {
      std::lock_guard<std::mutex> lock(mu_);
      followed_.erase(id);
    }
    std::lock_guard<std::mutex> lock(client_mu_);
    return client_.Delete(Resource::Pods(), (*pod)["metadata"].value("namespace", ""),
                          (*pod)["metadata"].value("name", ""));
  }

 private:
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
    ExitCallback on_exit;
    bool exited = false;
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
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = followed_.find(id);
      if (it != followed_.end()) {
        std::lock_guard<std::mutex> client_lock(client_mu_);
        return client_.Get(Resource::Pods(), it->second.ns, it->second.pod);
      }
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

  void Follow(const std::string& id, const std::string& ns, const std::string& pod,
              const std::string& lease, ExitCallback on_exit) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      followed_[id] = Followed{ns, pod, lease, std::move(on_exit)};
    }
    wake_.notify_all();
  }

  // Own client: the watch runs in this thread while the poller uses client_.
  void RunTenancyController() {
    k8s::Client client(options_.client);
    k8s::TenancyControllerOptions reconcile{options_.cilium, options_.nfs_mode};
    auto reconcile_one = [&](const Json& tenancy) {
      auto status = k8s::ReconcileTenancy(client, tenancy, reconcile);
      if (!status)
        spdlog::warn("tenancy {}: {}", tenancy["metadata"].value("name", ""),
                     status.error().message);
    };
    while (!stop_controller_) {
      // One round: list (reconciling everything), then watch until the resync interval ends;
      // the next round relists, which repairs drift nobody was told about.
      std::atomic<bool> round_over{false};
      std::thread timer([&] {
        auto until = std::chrono::steady_clock::now() + options_.tenancy_resync;
        while (std::chrono::steady_clock::now() < until && !stop_controller_)
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

  void Poll() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_) {
      wake_.wait_for(lock, options_.poll_interval);
      if (stopping_) break;
      auto snapshot = followed_;
      lock.unlock();
      std::vector<std::pair<std::string, ExitInfo>> ended;
      std::vector<std::string> done;
      for (auto& [id, f] : snapshot) {
        std::lock_guard<std::mutex> client_lock(client_mu_);
        bool exited = f.exited;
        if (!exited) {
          auto pod = client_.Get(Resource::Pods(), f.ns, f.pod);
          if (!pod && pod.error().category == ErrorCategory::kNotFound) {
            ended.push_back(
                {id, ExitInfo{std::nullopt, true, "pod " + f.ns + "/" + f.pod + " vanished"}});
            exited = true;
          } else if (pod) {
            BackendContainer c = FromPod(*pod);
            if (c.state == BackendState::kExited) {
              ended.push_back({id, ExitInfo{c.exit_code, false, ""}});
              exited = true;
            }
          }
        }
        // After the exit, walk the lease to checking (firmware-check Job) and on to a final state.
        if (exited && !f.lease.empty()) {
          auto lease = client_.Get(Resource::GpuLeases(), "", f.lease);
          if (lease) {
            auto state = k8s::ReconcileLease(client_, *lease, options_.firmware_check);
            if (state && (*state == "free" || *state == "quarantined")) done.push_back(id);
          }
        }
      }
      for (auto& [id, info] : ended) {
        ExitCallback callback;
        {
          std::lock_guard<std::mutex> relock(mu_);
          auto it = followed_.find(id);
          if (it == followed_.end() || it->second.exited) continue;
          it->second.exited = true;
          callback = it->second.on_exit;
        }
        if (callback) callback(id, info);
      }
      lock.lock();
      for (const auto& id : done) {
        auto it = followed_.find(id);
        if (it != followed_.end() && it->second.exited) it->second.lease.clear();
      }
    }
  }

  KubernetesBackendOptions options_;
  mutable std::mutex client_mu_;  // guards client_ (its last_error_)
  mutable k8s::Client client_;
  std::mutex mu_;  // guards followed_, stopping_, entitlements_
  std::map<std::string, std::vector<k8s::NfsEntitlement>> entitlements_;  // by tenancy
  std::condition_variable wake_;
  std::map<std::string, Followed> followed_;
  bool stopping_ = false;
  std::atomic<bool> stop_controller_{false};
  std::thread poller_;
  std::thread controller_;
};

}  // namespace

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

std::unique_ptr<ContainerBackend> CreateKubernetesBackend(KubernetesBackendOptions options) {
  return std::make_unique<KubernetesBackend>(std::move(options));
}

}  // namespace tessera::backends

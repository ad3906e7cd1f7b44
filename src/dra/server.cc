// DRAPlugin (v1, v1beta1) and Registration services. Every field kubelet sends is bounded and
// checked before use; per-claim failures go into that claim's `error`, as the API asks.
#include "dra/server.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>

#include "common/untrusted_text.h"
#include "dra/health/v1alpha1/api.grpc.pb.h"
#include "dra/v1/api.grpc.pb.h"
#include "dra/v1beta1/api.grpc.pb.h"
#include "pluginregistration/api.grpc.pb.h"

namespace tessera::dra {
namespace {

// kubelet sends the claims of one Pod; far fewer than this.
constexpr int kMaxClaimsPerCall = 256;
constexpr size_t kMaxRefField = 253;  // DNS subdomain names; UIDs are 36 bytes

Result<ClaimRef> CheckRef(const std::string& ns, const std::string& name, const std::string& uid) {
  for (const auto* field : {&ns, &name, &uid}) {
    if (field->empty() || field->size() > kMaxRefField) {
      return InvalidArgument("claim " + Excerpt(ns, 40) + "/" + Excerpt(name, 40) +
                             ": namespace, name and uid must be 1.." +
                             std::to_string(kMaxRefField) + " bytes");
    }
  }
  return ClaimRef{ns, name, uid};
}

// The same service in both API packages: the messages are field for field the same (v1's
// Device adds share_id, which exclusive allocations leave unset).
template <typename Pb>
class DraService final : public Pb::DRAPlugin::Service {
 public:
  explicit DraService(Driver* driver) : driver_(driver) {}

  grpc::Status NodePrepareResources(grpc::ServerContext*,
                                    const typename Pb::NodePrepareResourcesRequest* request,
                                    typename Pb::NodePrepareResourcesResponse* response) override {
    if (request->claims_size() > kMaxClaimsPerCall) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "too many claims in one call");
    }
    for (const auto& claim : request->claims()) {
      auto& out = (*response->mutable_claims())[claim.uid()];
      auto ref = CheckRef(claim.namespace_(), claim.name(), claim.uid());
      if (!ref) {
        out.set_error(ref.error().message);
        continue;
      }
      auto prepared = driver_->Prepare(*ref);
      if (!prepared) {
        spdlog::warn("prepare {}/{} ({}): {}", ref->namespace_name, ref->name, ref->uid,
                     prepared.error().message);
        out.set_error(prepared.error().message);
        continue;
      }
      for (const auto& device : prepared->devices) {
        auto* d = out.add_devices();
        for (const auto& request_name : device.request_names)
          d->add_request_names(request_name);
        d->set_pool_name(device.pool_name);
        d->set_device_name(device.device_name);
        for (const auto& id : device.cdi_device_ids)
          d->add_cdi_device_ids(id);
      }
    }
    return grpc::Status::OK;
  }

  grpc::Status NodeUnprepareResources(
      grpc::ServerContext*, const typename Pb::NodeUnprepareResourcesRequest* request,
      typename Pb::NodeUnprepareResourcesResponse* response) override {
    if (request->claims_size() > kMaxClaimsPerCall) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "too many claims in one call");
    }
    for (const auto& claim : request->claims()) {
      auto& out = (*response->mutable_claims())[claim.uid()];
      auto ref = CheckRef(claim.namespace_(), claim.name(), claim.uid());
      if (!ref) {
        out.set_error(ref.error().message);
        continue;
      }
      if (auto done = driver_->Unprepare(*ref); !done) out.set_error(done.error().message);
    }
    return grpc::Status::OK;
  }

 private:
  Driver* driver_;
};

struct V1 {
  using DRAPlugin = ::k8s::io::kubelet::pkg::apis::dra::v1::DRAPlugin;
  using NodePrepareResourcesRequest =
      ::k8s::io::kubelet::pkg::apis::dra::v1::NodePrepareResourcesRequest;
  using NodePrepareResourcesResponse =
      ::k8s::io::kubelet::pkg::apis::dra::v1::NodePrepareResourcesResponse;
  using NodeUnprepareResourcesRequest =
      ::k8s::io::kubelet::pkg::apis::dra::v1::NodeUnprepareResourcesRequest;
  using NodeUnprepareResourcesResponse =
      ::k8s::io::kubelet::pkg::apis::dra::v1::NodeUnprepareResourcesResponse;
};
struct V1beta1 {
  using DRAPlugin = ::k8s::io::kubelet::pkg::apis::dra::v1beta1::DRAPlugin;
  using NodePrepareResourcesRequest =
      ::k8s::io::kubelet::pkg::apis::dra::v1beta1::NodePrepareResourcesRequest;
  using NodePrepareResourcesResponse =
      ::k8s::io::kubelet::pkg::apis::dra::v1beta1::NodePrepareResourcesResponse;
  using NodeUnprepareResourcesRequest =
      ::k8s::io::kubelet::pkg::apis::dra::v1beta1::NodeUnprepareResourcesRequest;
  using NodeUnprepareResourcesResponse =
      ::k8s::io::kubelet::pkg::apis::dra::v1beta1::NodeUnprepareResourcesResponse;
};

// DRAResourceHealth (v1alpha1): the whole device list on connect, again on every change, and at
// least every kHealthResend so that kubelet, which turns a device silent for
// health_check_timeout_seconds into UNKNOWN, never does so while the plugin runs.
constexpr auto kHealthResend = std::chrono::seconds(20);
constexpr int64_t kHealthTimeoutSeconds = 60;
// How often a waiting stream notices that kubelet went away or the server is stopping.
constexpr auto kHealthCancelCheck = std::chrono::milliseconds(250);

class HealthService final : public ::v1alpha1::DRAResourceHealth::Service {
 public:
  explicit HealthService(const Driver* driver) : driver_(driver) {}

  grpc::Status NodeWatchResources(
      grpc::ServerContext* context, const ::v1alpha1::NodeWatchResourcesRequest*,
      grpc::ServerWriter<::v1alpha1::NodeWatchResourcesResponse>* writer) override {
    const std::string& pool = driver_->config().node_name;
    while (!context->IsCancelled()) {
      HealthSnapshot snapshot = driver_->Health();
      ::v1alpha1::NodeWatchResourcesResponse response;
      for (const auto& device : snapshot.devices) {
        auto* out = response.add_devices();
        out->mutable_device()->set_pool_name(pool);
        out->mutable_device()->set_device_name(device.device_name);
        out->set_health(static_cast<::v1alpha1::HealthStatus>(device.health));
        out->set_last_updated_time(device.changed_unix_seconds);
        out->set_health_check_timeout_seconds(kHealthTimeoutSeconds);
      }
      if (!writer->Write(response)) break;  // kubelet closed the stream
      auto resend_at = std::chrono::steady_clock::now() + kHealthResend;
      while (!context->IsCancelled() && std::chrono::steady_clock::now() < resend_at &&
             driver_->Health().version == snapshot.version) {
        driver_->WaitForHealthChange(snapshot.version, kHealthCancelCheck);
      }
    }
    return grpc::Status::OK;
  }

 private:
  const Driver* driver_;
};

class RegistrationService final : public ::pluginregistration::Registration::Service {
 public:
  RegistrationService(PluginInfo info, std::function<void(bool, const std::string&)> on_status)
      : info_(std::move(info)), on_status_(std::move(on_status)) {}

  grpc::Status GetInfo(grpc::ServerContext*, const ::pluginregistration::InfoRequest*,
                       ::pluginregistration::PluginInfo* out) override {
    out->set_type("DRAPlugin");
    out->set_name(info_.name);
    out->set_endpoint(info_.endpoint);
    for (const auto& version : info_.versions)
      out->add_supported_versions(version);
    return grpc::Status::OK;
  }

  grpc::Status NotifyRegistrationStatus(
      grpc::ServerContext*, const ::pluginregistration::RegistrationStatus* status,
      ::pluginregistration::RegistrationStatusResponse*) override {
    if (on_status_) on_status_(status->plugin_registered(), Excerpt(status->error(), 300));
    return grpc::Status::OK;
  }

 private:
  PluginInfo info_;
  std::function<void(bool, const std::string&)> on_status_;
};

}  // namespace

Result<std::unique_ptr<SocketServer>> SocketServer::ServeDra(Driver* driver,
                                                             const std::string& socket_path) {
  std::vector<std::unique_ptr<grpc::Service>> services;
  services.push_back(std::make_unique<DraService<V1>>(driver));
  services.push_back(std::make_unique<DraService<V1beta1>>(driver));
  services.push_back(std::make_unique<HealthService>(driver));
  return Serve(std::move(services), socket_path);
}

Result<std::unique_ptr<SocketServer>> SocketServer::ServeRegistration(
    PluginInfo info, std::function<void(bool, const std::string&)> on_status,
    const std::string& socket_path) {
  std::vector<std::unique_ptr<grpc::Service>> services;
  services.push_back(std::make_unique<RegistrationService>(std::move(info), std::move(on_status)));
  return Serve(std::move(services), socket_path);
}

Result<std::unique_ptr<SocketServer>> SocketServer::Serve(
    std::vector<std::unique_ptr<grpc::Service>> services, const std::string& socket_path) {
  std::unique_ptr<SocketServer> server(new SocketServer());
  server->services_ = std::move(services);
  server->socket_path_ = socket_path;
  // Dot names are skipped by kubelet's plugin watcher, so the private name is never dialled.
  static std::atomic<unsigned> counter{0};
  std::string dir = socket_path.substr(0, socket_path.rfind('/') + 1);
  std::string bind_path = dir + ".tessera-dra-" + std::to_string(::getpid()) + "-" +
                          std::to_string(counter++) + ".sock";
  ::unlink(bind_path.c_str());
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + bind_path, grpc::InsecureServerCredentials());
  for (auto& service : server->services_)
    builder.RegisterService(service.get());
  // kubelet is the only client: one queue and few pollers keep memory small on every node.
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::NUM_CQS, 1);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, 1);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, 2);
  server->server_ = builder.BuildAndStart();
  if (!server->server_) return Unavailable("cannot serve on " + bind_path);
  if (::rename(bind_path.c_str(), socket_path.c_str()) != 0) {
    int err = errno;
    server->Stop();
    return ErrnoError("rename " + bind_path + " to " + socket_path, err);
  }
  return server;
}

void SocketServer::Stop() {
  if (!server_) return;
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  server_->Wait();
  server_.reset();
}

SocketServer::~SocketServer() {
  Stop();
}

}  // namespace tessera::dra

// gRPC side of the plugin: translates kubelet messages to ResourceManager calls and Error
// categories to gRPC status codes (the only place that does).
#include "deviceplugin/server.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/resource_quota.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <thread>

#include "common/untrusted_text.h"
#include "deviceplugin/v1beta1/api.grpc.pb.h"

namespace tessera::deviceplugin {
namespace {

namespace pb = ::v1beta1;

// gRPC carries a status in trailers, and kubelet's channel fails every later call once one
// exceeds its metadata limit (8 KiB by default): a message is an excerpt, whatever built it.
constexpr size_t kMaxStatusMessage = 1024;

grpc::Status ToGrpc(const Error& error) {
  grpc::StatusCode code = grpc::StatusCode::INTERNAL;
  switch (error.category) {
    case ErrorCategory::kInvalidArgument:
      code = grpc::StatusCode::INVALID_ARGUMENT;
      break;
    case ErrorCategory::kNotFound:
      code = grpc::StatusCode::NOT_FOUND;
      break;
    case ErrorCategory::kAlreadyExists:
      code = grpc::StatusCode::ALREADY_EXISTS;
      break;
    case ErrorCategory::kFailedPrecondition:
      code = grpc::StatusCode::FAILED_PRECONDITION;
      break;
    case ErrorCategory::kPermissionDenied:
      code = grpc::StatusCode::PERMISSION_DENIED;
      break;
    case ErrorCategory::kUnavailable:
      code = grpc::StatusCode::UNAVAILABLE;
      break;
    case ErrorCategory::kInternal:
      code = grpc::StatusCode::INTERNAL;
      break;
  }
  return grpc::Status(code, Excerpt(error.message, kMaxStatusMessage));
}

void FillList(const std::vector<AdvertisedDevice>& devices, pb::ListAndWatchResponse* out) {
  for (const auto& device : devices) {
    auto* d = out->add_devices();
    d->set_id(device.id);
    d->set_health(device.healthy ? "Healthy" : "Unhealthy");
    if (device.numa_node >= 0) d->mutable_topology()->add_nodes()->set_id(device.numa_node);
  }
}

}  // namespace

// Unary calls use gRPC's callback API: they run on the thread that read the request, which
// saves the hand-off to a sync-server thread on each call (measured ~256 us for an empty sync
// round trip on the 2-core VM). ListAndWatch stays synchronous: it blocks on health changes.
using ServiceBase = pb::DevicePlugin::WithCallbackMethod_GetDevicePluginOptions<
    pb::DevicePlugin::WithCallbackMethod_GetPreferredAllocation<
        pb::DevicePlugin::WithCallbackMethod_Allocate<pb::DevicePlugin::Service>>>;

class ResourceServer::Service final : public ServiceBase {
 public:
  Service(std::shared_ptr<const ResourceManager> manager, const Resource* resource,
          std::shared_ptr<std::atomic<bool>> stopping)
      : manager_(std::move(manager)), resource_(resource), stopping_(std::move(stopping)) {}

  grpc::ServerUnaryReactor* GetDevicePluginOptions(grpc::CallbackServerContext* context,
                                                   const pb::Empty*,
                                                   pb::DevicePluginOptions* out) override {
    out->set_pre_start_required(false);
    out->set_get_preferred_allocation_available(true);
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerUnaryReactor* GetPreferredAllocation(grpc::CallbackServerContext* context,
                                                   const pb::PreferredAllocationRequest* request,
                                                   pb::PreferredAllocationResponse* out) override {
    auto* reactor = context->DefaultReactor();
    reactor->Finish(Preferred(*request, out));
    return reactor;
  }

  grpc::ServerUnaryReactor* Allocate(grpc::CallbackServerContext* context,
                                     const pb::AllocateRequest* request,
                                     pb::AllocateResponse* out) override {
    auto* reactor = context->DefaultReactor();
    reactor->Finish(Allocate(*request, out));
    return reactor;
  }

  grpc::Status ListAndWatch(grpc::ServerContext* context, const pb::Empty*,
                            grpc::ServerWriter<pb::ListAndWatchResponse>* writer) override {
    uint64_t generation = 0;
    pb::ListAndWatchResponse response;
    FillList(manager_->List(*resource_, &generation), &response);
    if (!writer->Write(response)) return grpc::Status::OK;
    // Short waits so a stopping server or a gone kubelet ends the stream promptly; a health
    // change wakes the wait at once.
    while (!stopping_->load() && !context->IsCancelled() && !manager_->shut_down()) {
      uint64_t now = manager_->WaitForChange(
          generation, std::chrono::steady_clock::now() + std::chrono::milliseconds(100));
      if (now == generation) continue;
      response.Clear();
      FillList(manager_->List(*resource_, &generation), &response);
      if (!writer->Write(response)) break;
    }
    return grpc::Status::OK;
  }

  grpc::Status PreStartContainer(grpc::ServerContext*, const pb::PreStartContainerRequest*,
                                 pb::PreStartContainerResponse*) override {
    return grpc::Status::OK;
  }

 private:
  grpc::Status Preferred(const pb::PreferredAllocationRequest& request,
                         pb::PreferredAllocationResponse* out) {
    for (const auto& container : request.container_requests()) {
      PreferredRequest req;
      req.available.assign(container.available_deviceids().begin(),
                           container.available_deviceids().end());
      req.must_include.assign(container.must_include_deviceids().begin(),
                              container.must_include_deviceids().end());
      req.size = container.allocation_size();
      auto chosen = manager_->Preferred(*resource_, req);
      if (!chosen) return ToGrpc(chosen.error());
      auto* response = out->add_container_responses();
      for (auto& id : *chosen)
        response->add_deviceids(std::move(id));
    }
    return grpc::Status::OK;
  }

  grpc::Status Allocate(const pb::AllocateRequest& request, pb::AllocateResponse* out) {
    std::vector<std::vector<std::string>> requests;
    requests.reserve(request.container_requests_size());
    for (const auto& container : request.container_requests()) {
      requests.emplace_back(container.devices_ids().begin(), container.devices_ids().end());
    }
    auto allocations = manager_->Allocate(*resource_, requests);
    if (!allocations) return ToGrpc(allocations.error());
    for (const auto& allocation : *allocations) {
      auto* response = out->add_container_responses();
      for (const auto& [key, value] : allocation.envs)
        (*response->mutable_envs())[key] = value;
      for (const auto& [key, value] : allocation.annotations)
        (*response->mutable_annotations())[key] = value;
      for (const auto& mount : allocation.mounts) {
        auto* m = response->add_mounts();
        m->set_container_path(mount.container_path);
        m->set_host_path(mount.host_path);
        m->set_read_only(mount.read_only);
      }
      for (const auto& device : allocation.devices) {
        auto* d = response->add_devices();
        d->set_container_path(device.container_path);
        d->set_host_path(device.host_path);
        d->set_permissions(device.permissions);
      }
      for (const auto& name : allocation.cdi_devices)
        response->add_cdi_devices()->set_name(name);
    }
    return grpc::Status::OK;
  }

  std::shared_ptr<const ResourceManager> manager_;
  const Resource* resource_;
  std::shared_ptr<std::atomic<bool>> stopping_;
};

Result<std::unique_ptr<ResourceServer>> ResourceServer::Start(
    std::shared_ptr<const ResourceManager> manager, const Resource* resource,
    const std::string& socket_path, int threads) {
  std::unique_ptr<ResourceServer> server(new ResourceServer());
  server->manager_ = manager;
  server->resource_ = resource;
  server->socket_path_ = socket_path;
  server->stopping_ = std::make_shared<std::atomic<bool>>(false);
  server->service_ = std::make_unique<Service>(manager, resource, server->stopping_);
  // Bind under a private name and rename into place: gRPC unlinks a unix socket's path when a
  // server is torn down, possibly later on one of its own threads, and that must never remove
  // the socket of the server that replaced it. (Dot names are skipped by kubelet's watcher.)
  static std::atomic<unsigned> counter{0};
  std::string dir = socket_path.substr(0, socket_path.rfind('/') + 1);
  std::string bind_path =
      dir + ".tessera-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + ".sock";
  ::unlink(bind_path.c_str());

  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + bind_path, grpc::InsecureServerCredentials());
  builder.RegisterService(server->service_.get());
  // One completion queue and few pollers: kubelet is the only client, and every thread costs
  // stack and arena memory (the plugin runs on every node).
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::NUM_CQS, 1);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, 1);
  // Two pollers at most: with one, the poller that takes a call spawns a replacement and the
  // surplus thread exits afterwards, i.e. a thread created and destroyed per call.
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, 2);
  grpc::ResourceQuota quota("tessera-device-plugin");
  // ListAndWatch holds a thread for its whole life (a new kubelet's stream may overlap the old
  // one's end), and a poller hands off to a fresh poller while it runs a call; when the quota
  // is exhausted gRPC answers RESOURCE_EXHAUSTED, so keep headroom for both.
  quota.SetMaxThreads(std::max(threads, 1) + 4);
  builder.SetResourceQuota(quota);
  server->server_ = builder.BuildAndStart();
  if (!server->server_) return Unavailable("cannot serve on " + bind_path);
  // rename() replaces a stale file from an earlier run atomically.
  if (::rename(bind_path.c_str(), socket_path.c_str()) != 0) {
    int err = errno;
    server->Stop();
    return ErrnoError("rename " + bind_path + " to " + socket_path, err);
  }
  return server;
}

void ResourceServer::Stop() {
  if (!server_) return;
  stopping_->store(true);
  // Streams notice `stopping_` within one wait (100 ms); the deadline bounds the rest.
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  server_->Wait();
  server_.reset();
  ::unlink(socket_path_.c_str());
}

ResourceServer::~ResourceServer() {
  Stop();
}

Status RegisterWithKubelet(const std::string& kubelet_socket, const std::string& endpoint,
                           const std::string& resource_name, bool preferred_allocation,
                           int timeout_ms) {
  auto channel =
      grpc::CreateChannel("unix://" + kubelet_socket, grpc::InsecureChannelCredentials());
  auto stub = pb::Registration::NewStub(channel);
  pb::RegisterRequest request;
  request.set_version(kApiVersion);
  request.set_endpoint(endpoint);
  request.set_resource_name(resource_name);
  request.mutable_options()->set_get_preferred_allocation_available(preferred_allocation);
  request.mutable_options()->set_pre_start_required(false);
  pb::Empty response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
  grpc::Status status = stub->Register(&context, request, &response);
  if (!status.ok()) {
    return Unavailable("register " + resource_name + " with " + kubelet_socket + ": " +
                       status.error_message());
  }
  return Ok();
}

}  // namespace tessera::deviceplugin

#include "podresources/podresources_kubelet.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <mutex>

#include "podresources/v1/api.grpc.pb.h"

namespace tessera::testing {

class ListerService final : public ::v1::PodResourcesLister::Service {
 public:
  grpc::Status List(grpc::ServerContext*, const ::v1::ListPodResourcesRequest*,
                    ::v1::ListPodResourcesResponse* response) override {
    std::lock_guard lock(mu);
    ++calls;
    for (const auto& pod : pods) {
      auto* out = response->add_pod_resources();
      out->set_name(pod.name);
      out->set_namespace_(pod.namespace_name);
      // One container entry per container name, in order.
      auto container_named = [out](const std::string& name) {
        for (auto& existing : *out->mutable_containers()) {
          if (existing.name() == name) return &existing;
        }
        ::v1::ContainerResources* added = out->add_containers();
        added->set_name(name);
        return added;
      };
      for (const auto& devices : pod.devices) {
        auto* entry = container_named(devices.container)->add_devices();
        entry->set_resource_name(devices.resource);
        for (const auto& id : devices.ids)
          entry->add_device_ids(id);
      }
      // A DRA claim's device, one claim entry each, as kubelet lists a prepared claim.
      for (const auto& claimed : pod.claim_devices) {
        auto* claim = container_named(claimed.container)->add_dynamic_resources();
        claim->set_claim_name(claimed.claim_name);
        claim->set_claim_namespace(claimed.claim_namespace);
        auto* resource = claim->add_claim_resources();
        resource->set_driver_name(claimed.driver);
        resource->set_pool_name(claimed.pool);
        resource->set_device_name(claimed.device);
      }
    }
    return grpc::Status::OK;
  }

  std::mutex mu;  // guards pods, calls
  std::vector<podresources::PodDevices> pods;
  int calls = 0;
};

struct PodResourcesKubelet::Impl {
  ListerService service;
  std::unique_ptr<grpc::Server> server;
};

PodResourcesKubelet::PodResourcesKubelet(std::string socket_path)
    : socket_path_(std::move(socket_path)), impl_(std::make_unique<Impl>()) {
  ::unlink(socket_path_.c_str());
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + socket_path_, grpc::InsecureServerCredentials());
  builder.RegisterService(&impl_->service);
  impl_->server = builder.BuildAndStart();
}

PodResourcesKubelet::~PodResourcesKubelet() {
  if (impl_->server) {
    impl_->server->Shutdown();
    impl_->server->Wait();
  }
  ::unlink(socket_path_.c_str());
}

bool PodResourcesKubelet::ok() const {
  return impl_->server != nullptr;
}

void PodResourcesKubelet::SetPods(std::vector<podresources::PodDevices> pods) {
  std::lock_guard lock(impl_->service.mu);
  impl_->service.pods = std::move(pods);
}

int PodResourcesKubelet::ListCalls() const {
  std::lock_guard lock(impl_->service.mu);
  return impl_->service.calls;
}

}  // namespace tessera::testing

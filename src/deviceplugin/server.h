// The kubelet v1beta1 protocol over a ResourceManager: one gRPC server per resource on a unix
// socket, and the Register call to kubelet. gRPC only; every decision is the manager's.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "common/error.h"
#include "deviceplugin/deviceplugin.h"

namespace grpc {
class Server;
}

namespace tessera::deviceplugin {

inline constexpr const char* kApiVersion = "v1beta1";
inline constexpr const char* kKubeletSocket = "kubelet.sock";

class ResourceServer {
 public:
  // Removes a stale socket file, then serves DevicePlugin on `socket_path` with at most
  // `threads` gRPC threads. `resource` must live as long as `manager`.
  static Result<std::unique_ptr<ResourceServer>> Start(
      std::shared_ptr<const ResourceManager> manager, const Resource* resource,
      const std::string& socket_path, int threads);
  ~ResourceServer();
  ResourceServer(const ResourceServer&) = delete;
  ResourceServer& operator=(const ResourceServer&) = delete;

  // Ends open ListAndWatch streams and stops serving; the socket file is removed.
  void Stop();
  const std::string& socket_path() const { return socket_path_; }
  const Resource& resource() const { return *resource_; }

  class Service;

 private:
  ResourceServer() = default;

  std::shared_ptr<const ResourceManager> manager_;
  const Resource* resource_ = nullptr;
  std::string socket_path_;
  std::shared_ptr<std::atomic<bool>> stopping_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
};

// Register(version v1beta1, endpoint = socket file name, resource name, options) with the
// kubelet serving `kubelet_socket`.
Status RegisterWithKubelet(const std::string& kubelet_socket, const std::string& endpoint,
                           const std::string& resource_name, bool preferred_allocation,
                           int timeout_ms = 2000);

}  // namespace tessera::deviceplugin

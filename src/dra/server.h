// gRPC side of the DRA plugin: the DRAPlugin service (v1 and v1beta1) and the DRAResourceHealth
// stream (v1alpha1) over a Driver, and the plugin-watcher Registration service. Error categories
// become gRPC status codes only here.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dra/dra.h"

namespace grpc {
class Server;
class Service;
}  // namespace grpc

namespace tessera::dra {

// What GetInfo answers.
struct PluginInfo {
  std::string name;      // the driver name
  std::string endpoint;  // absolute path of dra.sock
  std::vector<std::string> versions = {"v1.DRAPlugin", "v1beta1.DRAPlugin"};
};

// A gRPC server on one unix socket, bound under a private name and renamed into place so that a
// replaced server's teardown never unlinks its successor's socket.
class SocketServer {
 public:
  // DRAPlugin v1 and v1beta1 and DRAResourceHealth v1alpha1 over `driver`.
  static Result<std::unique_ptr<SocketServer>> ServeDra(Driver* driver,
                                                        const std::string& socket_path);
  // Registration; `on_status(registered, error)` runs on each NotifyRegistrationStatus.
  static Result<std::unique_ptr<SocketServer>> ServeRegistration(
      PluginInfo info, std::function<void(bool, const std::string&)> on_status,
      const std::string& socket_path);
  ~SocketServer();
  void Stop();
  const std::string& socket_path() const { return socket_path_; }

 private:
  SocketServer() = default;
  static Result<std::unique_ptr<SocketServer>> Serve(
      std::vector<std::unique_ptr<grpc::Service>> services, const std::string& socket_path);

  std::vector<std::unique_ptr<grpc::Service>> services_;
  std::unique_ptr<grpc::Server> server_;
  std::string socket_path_;
};

}  // namespace tessera::dra

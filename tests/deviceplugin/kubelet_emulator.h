// An in-repo kubelet for tests and benchmarks: a real Registration server on
// <socket dir>/kubelet.sock, and a real client that dials a plugin's endpoint, follows its
// ListAndWatch stream and calls GetPreferredAllocation and Allocate. Same wire contract as
// kubelet (the generated v1beta1 stubs).
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "deviceplugin/v1beta1/api.grpc.pb.h"

namespace tessera::testing {

class KubeletEmulator {
 public:
  explicit KubeletEmulator(std::string socket_dir);
  ~KubeletEmulator();
  KubeletEmulator(const KubeletEmulator&) = delete;
  KubeletEmulator& operator=(const KubeletEmulator&) = delete;

  // Serves Registration on kubelet.sock (what kubelet does when it starts).
  void Start();
  void Stop();
  const std::string& socket_dir() const { return socket_dir_; }

  // Waits for the n-th (1-based) registration of `resource`; nullopt on timeout.
  std::optional<v1beta1::RegisterRequest> WaitForRegistration(const std::string& resource, int n,
                                                              std::chrono::milliseconds timeout);
  int RegistrationCount(const std::string& resource);
  // When the last registration of `resource` arrived.
  std::chrono::steady_clock::time_point LastRegistrationTime(const std::string& resource);

  class Service;

 private:
  std::string socket_dir_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
};

// A client of one plugin endpoint, following its ListAndWatch stream on a thread.
class PluginClient {
 public:
  explicit PluginClient(const std::string& socket_path);
  ~PluginClient();
  PluginClient(const PluginClient&) = delete;
  PluginClient& operator=(const PluginClient&) = delete;

  v1beta1::DevicePlugin::Stub& stub() { return *stub_; }

  // Starts following ListAndWatch.
  void Watch();
  // Waits until a list satisfying `accept` arrives (checked against the latest list first);
  // returns it, or nullopt on timeout.
  std::optional<v1beta1::ListAndWatchResponse> WaitForList(
      const std::function<bool(const v1beta1::ListAndWatchResponse&)>& accept,
      std::chrono::milliseconds timeout);
  // When the latest list arrived.
  std::chrono::steady_clock::time_point LastListTime();
  bool stream_ended();

  grpc::Status Allocate(const std::vector<std::vector<std::string>>& containers,
                        v1beta1::AllocateResponse* response);
  grpc::Status Preferred(const std::vector<std::string>& available,
                         const std::vector<std::string>& must_include, int size,
                         std::vector<std::string>* chosen);

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1beta1::DevicePlugin::Stub> stub_;
  std::thread watcher_;
  std::unique_ptr<grpc::ClientContext> watch_context_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<v1beta1::ListAndWatchResponse> lists_;
  std::chrono::steady_clock::time_point last_list_time_{};
  bool ended_ = false;
};

// Health of `id` in a list ("" when absent).
std::string HealthOf(const v1beta1::ListAndWatchResponse& list, const std::string& id);

// True when the list has devices and every one of them is Healthy.
bool AllHealthy(const v1beta1::ListAndWatchResponse& list);

}  // namespace tessera::testing

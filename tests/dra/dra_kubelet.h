// A DRA kubelet emulator for end-to-end tests and the benchmark: kubelet's plugin watcher
// (find <driver>-reg.sock in the registry dir, GetInfo, validate, NotifyRegistrationStatus) and
// its DRA manager (dial the endpoint, NodePrepareResources / NodeUnprepareResources over the
// API version the registration chose).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dra/dra.h"

namespace tessera::testing {

struct DraPrepareResult {
  std::vector<dra::PreparedDevice> devices;
  std::string error;
};

class DraKubelet {
 public:
  // `versions`: the DRA service versions this kubelet speaks, preferred first.
  DraKubelet(std::string registry_dir, std::string driver,
             std::vector<std::string> versions = {"v1.DRAPlugin", "v1beta1.DRAPlugin"});
  ~DraKubelet();

  // Waits up to `timeout` for the registration socket, then registers as kubelet does. With
  // `refuse` set, reports plugin_registered=false with `reason` instead. Returns the problem,
  // or an empty string when the plugin was registered.
  std::string Register(std::chrono::milliseconds timeout, bool refuse = false,
                       const std::string& reason = "");
  const std::string& endpoint() const { return endpoint_; }
  const std::string& version() const { return version_; }  // "v1.DRAPlugin" or "v1beta1..."
  // Forces the service version of later calls (both are served by one plugin).
  void UseVersion(const std::string& version) { version_ = version; }

  // By claim UID; a transport failure is reported in `*rpc_error`.
  std::map<std::string, DraPrepareResult> Prepare(const std::vector<dra::ClaimRef>& claims,
                                                  std::string* rpc_error = nullptr);
  std::map<std::string, std::string> Unprepare(const std::vector<dra::ClaimRef>& claims,
                                               std::string* rpc_error = nullptr);

 private:
  struct Channel;
  std::string registry_dir_, driver_;
  std::vector<std::string> versions_;
  std::string endpoint_, version_;
  std::unique_ptr<Channel> channel_;
};

// kubelet's side of DRAResourceHealth (v1alpha1): one NodeWatchResources stream on `endpoint`,
// read on its own thread until destruction.
class DraHealthWatch {
 public:
  struct Entry {
    std::string pool;
    int health = 0;  // 0 UNKNOWN, 1 HEALTHY, 2 UNHEALTHY
    int64_t last_updated_time = 0;
    int64_t health_check_timeout_seconds = 0;
  };
  explicit DraHealthWatch(const std::string& endpoint);
  ~DraHealthWatch();
  // The latest message's devices by device name (empty before the first message).
  std::map<std::string, Entry> Latest() const;
  int Messages() const;
  // The stream's final status message once it ended, else empty.
  std::string Ended() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// <build>/src/cli/tessera-dra-plugin
std::string DraPluginBinary();

}  // namespace tessera::testing

// kubelet's PodResources endpoint for tests: PodResourcesLister (v1) served over a real unix
// socket, answering List with the Pods a test sets, as kubelet does for the Pods it runs.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "podresources/podresources.h"

namespace tessera::testing {

class PodResourcesKubelet {
 public:
  explicit PodResourcesKubelet(std::string socket_path);
  ~PodResourcesKubelet();
  PodResourcesKubelet(const PodResourcesKubelet&) = delete;
  PodResourcesKubelet& operator=(const PodResourcesKubelet&) = delete;

  bool ok() const;
  // What List answers from now on.
  void SetPods(std::vector<podresources::PodDevices> pods);
  int ListCalls() const;
  const std::string& socket_path() const { return socket_path_; }

 private:
  struct Impl;
  std::string socket_path_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::testing

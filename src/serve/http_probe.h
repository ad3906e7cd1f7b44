// HTTP readiness probes (`ready: {httpGet}`): a GET of a path on a published port, answered
// 200..399 within a deadline. Redirects are not followed (a 3xx counts as ready, as in
// Kubernetes' httpGet probe) and at most a few KiB of the answer are read.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace tessera::serve {

struct HttpProbeTarget {
  std::string address;  // an IPv4 or IPv6 address (the publish address)
  int port = 0;
  std::string path = "/";
};

// Every target probed at once; one verdict per target (true: answered 200..399 within
// `timeout`). Blocks for at most about `timeout`.
std::vector<bool> ProbeHttp(const std::vector<HttpProbeTarget>& targets,
                            std::chrono::milliseconds timeout);

}  // namespace tessera::serve
